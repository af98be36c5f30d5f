//! Test fixtures: a clock moved by hand, msgpack batches as engines encode
//! them, and an in-process publisher (PUB + ROUTER on loopback, OS-chosen
//! ports) that behaves like vLLM's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rmpv::Value;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use super::index::Clock;

/// A clock the test moves by hand.
#[derive(Clone, Default)]
pub(crate) struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    pub(crate) fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }

    pub(crate) fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    pub(crate) fn clock(&self) -> Clock {
        let now = Arc::clone(&self.0);
        Arc::new(move || now.load(Ordering::SeqCst))
    }
}

fn s(text: &str) -> Value {
    Value::from(text)
}

fn ids(values: &[u64]) -> Value {
    Value::Array(values.iter().map(|&v| Value::from(v)).collect())
}

/// `BlockStored` as current engines send it (a map, defaults omitted).
pub(crate) fn stored_event(
    block_hashes: &[u64],
    parent: Option<u64>,
    token_ids: &[u32],
    block_size: usize,
) -> Value {
    Value::Map(vec![
        (s("type"), s("BlockStored")),
        (s("block_hashes"), ids(block_hashes)),
        (
            s("parent_block_hash"),
            parent.map_or(Value::Nil, Value::from),
        ),
        (
            s("token_ids"),
            Value::Array(token_ids.iter().map(|&t| Value::from(t)).collect()),
        ),
        (s("block_size"), Value::from(block_size as u64)),
        (s("medium"), s("GPU")),
    ])
}

/// `BlockRemoved` as older engines send it (an array).
pub(crate) fn removed_event(block_hashes: &[u64]) -> Value {
    Value::Array(vec![s("BlockRemoved"), ids(block_hashes), s("GPU")])
}

pub(crate) fn cleared_event() -> Value {
    Value::Array(vec![s("AllBlocksCleared")])
}

/// A batch payload `[ts, events]`.
pub(crate) fn batch_payload(events: Vec<Value>) -> Bytes {
    let mut bytes = Vec::new();
    rmpv::encode::write_value(
        &mut bytes,
        &Value::Array(vec![Value::F64(1.0), Value::Array(events)]),
    )
    .unwrap();
    Bytes::from(bytes)
}

pub(crate) fn live_frames(topic: &str, seq: u64, payload: &Bytes) -> Vec<Bytes> {
    vec![
        Bytes::copy_from_slice(topic.as_bytes()),
        Bytes::copy_from_slice(&seq.to_be_bytes()),
        payload.clone(),
    ]
}

/// How the publisher frames replay answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReplayForm {
    /// `["", seq, payload]`, ended by `["", -1, ""]`.
    Older,
    /// `["", topic, seq, payload]`, ended by `["", "", -1, ""]`.
    Current,
}

#[derive(Debug)]
struct Buffer {
    batches: Vec<(u64, Bytes)>,
    form: ReplayForm,
    /// Replay requests answered.
    requests: u64,
}

/// A vLLM-like publisher: numbers batches from 0, publishes them on PUB,
/// buffers them for replay on ROUTER.
pub(crate) struct FakePublisher {
    topic: String,
    socket: PubSocket,
    pub(crate) endpoint: String,
    pub(crate) replay_endpoint: String,
    next_seq: u64,
    buffer: Arc<Mutex<Buffer>>,
    router: tokio::task::JoinHandle<()>,
}

impl FakePublisher {
    pub(crate) async fn start(topic: &str) -> FakePublisher {
        Self::start_at(topic, "tcp://127.0.0.1:0").await
    }

    /// A publisher whose live socket binds `endpoint` (retried for a while:
    /// a socket that just closed may still hold the port).
    pub(crate) async fn start_at(topic: &str, endpoint: &str) -> FakePublisher {
        let mut socket = PubSocket::new();
        let mut attempts = 0;
        let endpoint = loop {
            match socket.bind(endpoint).await {
                Ok(bound) => break bound.to_string(),
                Err(error) if attempts < 100 => {
                    attempts += 1;
                    log::debug!("bind {endpoint}: {error}; retrying");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(error) => panic!("bind {endpoint}: {error}"),
            }
        };
        let mut router = RouterSocket::new();
        let replay_endpoint = router.bind("tcp://127.0.0.1:0").await.unwrap().to_string();
        let buffer = Arc::new(Mutex::new(Buffer {
            batches: Vec::new(),
            form: ReplayForm::Current,
            requests: 0,
        }));
        let served = Arc::clone(&buffer);
        let topic_owned = topic.to_string();
        let router = tokio::spawn(async move {
            loop {
                let Ok(request) = router.recv().await else {
                    return;
                };
                let frames = request.into_vec();
                let (identity, start) = match &frames[..] {
                    [identity, _, start] => (
                        identity.clone(),
                        u64::from_be_bytes(start[..].try_into().unwrap()),
                    ),
                    _ => continue,
                };
                let (answers, form) = {
                    let mut buffer = served.lock().unwrap();
                    buffer.requests += 1;
                    let answers: Vec<(u64, Bytes)> = buffer
                        .batches
                        .iter()
                        .filter(|(seq, _)| *seq >= start)
                        .cloned()
                        .collect();
                    (answers, buffer.form)
                };
                let topic = Bytes::copy_from_slice(topic_owned.as_bytes());
                let end = Bytes::copy_from_slice(&(-1i64).to_be_bytes());
                let mut replies: Vec<Vec<Bytes>> = answers
                    .into_iter()
                    .map(|(seq, payload)| {
                        let seq = Bytes::copy_from_slice(&seq.to_be_bytes());
                        match form {
                            ReplayForm::Older => vec![Bytes::new(), seq, payload],
                            ReplayForm::Current => vec![Bytes::new(), topic.clone(), seq, payload],
                        }
                    })
                    .collect();
                replies.push(match form {
                    ReplayForm::Older => vec![Bytes::new(), end, Bytes::new()],
                    ReplayForm::Current => vec![Bytes::new(), Bytes::new(), end, Bytes::new()],
                });
                for mut reply in replies {
                    reply.insert(0, identity.clone());
                    if router
                        .send(ZmqMessage::try_from(reply).unwrap())
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        });
        FakePublisher {
            topic: topic.to_string(),
            socket,
            endpoint,
            replay_endpoint,
            next_seq: 0,
            buffer,
            router,
        }
    }

    pub(crate) fn set_replay_form(&self, form: ReplayForm) {
        self.buffer.lock().unwrap().form = form;
    }

    /// Forgets buffered batches before `seq` (the buffer rolled over).
    pub(crate) fn forget_before(&self, seq: u64) {
        self.buffer
            .lock()
            .unwrap()
            .batches
            .retain(|(buffered, _)| *buffered >= seq);
    }

    pub(crate) fn replay_requests(&self) -> u64 {
        self.buffer.lock().unwrap().requests
    }

    /// Publishes a batch of `events` under the next seq; returns the seq.
    pub(crate) async fn publish(&mut self, events: Vec<Value>) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.send(seq, batch_payload(events)).await;
        seq
    }

    /// Numbers and buffers a batch without sending it: a lost message.
    pub(crate) fn lose(&mut self, events: Vec<Value>) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.buffer
            .lock()
            .unwrap()
            .batches
            .push((seq, batch_payload(events)));
        seq
    }

    /// Sends `payload` as `seq` (buffered too), whatever came before.
    pub(crate) async fn send(&mut self, seq: u64, payload: Bytes) {
        self.buffer
            .lock()
            .unwrap()
            .batches
            .push((seq, payload.clone()));
        let frames = live_frames(&self.topic, seq, &payload);
        self.socket
            .send(ZmqMessage::try_from(frames).unwrap())
            .await
            .unwrap();
    }

    /// Starts numbering again from 0 with an empty buffer: an engine restart.
    pub(crate) fn restart(&mut self) {
        self.next_seq = 0;
        self.buffer.lock().unwrap().batches.clear();
    }

    /// Publishes empty batches until `seen` holds, so the subscription has
    /// reached the publisher (a PUB drops what no subscriber asked for yet).
    pub(crate) async fn publish_until(&mut self, seen: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !seen() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the subscriber never received a batch"
            );
            self.publish(Vec::new()).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for FakePublisher {
    fn drop(&mut self) {
        self.router.abort();
    }
}

/// Waits (bounded) until `condition` holds.
pub(crate) async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
