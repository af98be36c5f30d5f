//! One data-parallel rank's subscriber: a SUB socket on the rank's live
//! stream, a replay client for gaps, and the driver that turns messages
//! into index updates.
//!
//! What the driver does with a message, by its seq (`sequence.rs`):
//!
//! - next: apply it;
//! - duplicate of a replayed batch: skip it;
//! - gap: replay from the first missing seq. When the answer continues
//!   from exactly that seq up to the live message, apply it in order.
//!   Otherwise (no replay endpoint, an error, a timeout, or a buffer that
//!   starts later than the missing seq) clear the rank. A contiguous answer
//!   that reaches the live message but starts too late is still applied
//!   after the clear: a clean suffix of the stream only leaves blocks out,
//!   it never claims a removed one;
//! - restart (seq went backwards): clear the rank, then join;
//! - first message (joining): at seq 0 the whole history is in front of us;
//!   later, a replay from seq 0 catches up on what the publisher still
//!   buffers, and the rank is complete if that reaches back to 0.
//!
//! Connection: the SUB socket reconnects by itself once connected (the
//! `zeromq` crate's own backoff, resending the subscription); this loop
//! reconnects with [`RECONNECT_INITIAL`] doubling up to [`RECONNECT_MAX`]
//! when connecting fails or the socket errors. A publisher that is gone
//! goes quiet, and quiet ranks go stale (`index.rs`). Nothing here is on the
//! request path.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use zeromq::{Socket, SocketEvent, SocketOptions, SocketRecv, SubSocket, ZmqError};

use super::counters::ResetReason;
use super::decode::{decode_batch, split_live};
use super::index::RankWriter;
use super::replay::ReplaySource;
use super::sequence::{SequenceTracker, Verdict};

/// First wait before connecting again.
pub const RECONNECT_INITIAL: Duration = Duration::from_millis(500);
/// The longest wait between two connection attempts.
pub const RECONNECT_MAX: Duration = Duration::from_secs(30);
/// How long one connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Turns one rank's messages into index updates; see the module
/// documentation.
pub(crate) struct RankDriver<R> {
    writer: RankWriter,
    tracker: SequenceTracker,
    replay: Option<R>,
}

impl<R: ReplaySource> RankDriver<R> {
    /// A driver for a rank the index has just (re)configured: nothing of
    /// its stream is known yet.
    pub(crate) fn new(writer: RankWriter, replay: Option<R>) -> Self {
        RankDriver {
            writer,
            tracker: SequenceTracker::new(),
            replay,
        }
    }

    pub(crate) fn writer(&self) -> &RankWriter {
        &self.writer
    }

    /// Handles one live message.
    pub(crate) async fn on_live(&mut self, frames: &[Bytes]) {
        self.writer.record_message();
        let message = match split_live(frames) {
            Ok(message) => message,
            Err(error) => {
                // Its seq is unknown; if it was a batch, the next one shows a gap.
                self.writer.decode_error(None, &error);
                return;
            }
        };
        let (seq, payload) = (message.seq, message.payload.clone());
        match self.tracker.classify(seq) {
            Verdict::Next => self.apply(seq, &payload),
            Verdict::Duplicate => self.writer.duplicate(),
            Verdict::First => self.join(seq, &payload).await,
            Verdict::Restarted => {
                self.writer.reset(ResetReason::Restart);
                self.tracker.reset();
                self.join(seq, &payload).await;
            }
            Verdict::Gap { missing_from } => {
                self.writer.gap(missing_from, seq);
                self.catch_up(missing_from, seq, &payload, false).await;
            }
        }
        self.writer.set_next_seq(self.tracker.next_expected());
    }

    /// The first message of a stream (subscriber start, engine restart).
    async fn join(&mut self, seq: u64, payload: &Bytes) {
        if seq == 0 {
            self.writer.mark_complete();
            self.apply(seq, payload);
        } else {
            self.catch_up(0, seq, payload, true).await;
        }
    }

    /// Brings the rank from `from` to the live message `seq` (which is
    /// applied last unless the replay already did).
    async fn catch_up(&mut self, from: u64, seq: u64, payload: &Bytes, joining: bool) {
        let run = match &self.replay {
            None => None,
            Some(replay) => match replay.fetch(from).await {
                Ok(batches) => Some(contiguous_run(batches, from)),
                Err(error) => {
                    self.writer.replay_failed(from, &error);
                    None
                }
            },
        };
        let reaches_live =
            |run: &[(u64, Bytes)]| run.last().is_some_and(|(last, _)| last + 1 >= seq);
        let starts_at_from =
            |run: &[(u64, Bytes)]| run.first().is_some_and(|(first, _)| *first == from);
        match run {
            Some(run) if starts_at_from(&run) && reaches_live(&run) => {
                self.writer.replay_ok(from, run.len());
                if joining {
                    // Followed from seq 0: nothing of the engine's life is missing.
                    self.writer.mark_complete();
                }
                self.apply_run(run);
            }
            Some(run) if joining && reaches_live(&run) => {
                // The publisher no longer buffers seq 0 (a long-running
                // engine): its buffer is a clean suffix of the stream to
                // join at, and the rank rebuilds from there.
                self.writer.replay_ok(from, run.len());
                self.apply_run(run);
            }
            run => {
                if let Some(run) = &run {
                    let answered = match (run.first(), run.last()) {
                        (Some((first, _)), Some((last, _))) => format!("{first}..={last}"),
                        _ => "nothing".to_string(),
                    };
                    self.writer.replay_failed(
                        from,
                        &format_args!(
                            "the publisher answered {answered}, not {from}..{seq} contiguously"
                        ),
                    );
                }
                if !joining {
                    self.writer.reset(ResetReason::Gap);
                }
                if let Some(run) = run.filter(|run| reaches_live(run)) {
                    self.apply_run(run);
                }
            }
        }
        if self.tracker.next_expected().is_none_or(|next| next <= seq) {
            self.apply(seq, payload);
        }
    }

    /// Applies replayed batches that continue each other.
    fn apply_run(&mut self, run: Vec<(u64, Bytes)>) {
        let (Some(&(first, _)), Some(&(last, _))) = (run.first(), run.last()) else {
            return;
        };
        for (seq, payload) in &run {
            self.apply(*seq, payload);
        }
        self.tracker.replayed(first, last);
    }

    fn apply(&mut self, seq: u64, payload: &Bytes) {
        match decode_batch(payload) {
            Ok(batch) => {
                self.writer.apply(&batch);
            }
            Err(error) => {
                self.writer.decode_error(Some(seq), &error);
                // What the batch removed is unknown.
                self.writer.reset(ResetReason::Malformed);
            }
        }
        self.tracker.applied(seq);
    }
}

/// The batches of a replay answer from `from` on that continue each other
/// from the first.
fn contiguous_run(batches: Vec<(u64, Bytes)>, from: u64) -> Vec<(u64, Bytes)> {
    let mut run: Vec<(u64, Bytes)> = Vec::with_capacity(batches.len());
    for (seq, payload) in batches.into_iter().filter(|(seq, _)| *seq >= from) {
        if run.last().is_some_and(|(last, _)| seq != last + 1) {
            break;
        }
        run.push((seq, payload));
    }
    run
}

/// One rank's live stream: where it is, and its driver.
pub(crate) struct RankSubscriber<R> {
    endpoint: String,
    topic: String,
    driver: RankDriver<R>,
}

impl<R: ReplaySource> RankSubscriber<R> {
    pub(crate) fn new(endpoint: String, topic: String, driver: RankDriver<R>) -> Self {
        RankSubscriber {
            endpoint,
            topic,
            driver,
        }
    }

    /// Subscribes and consumes until cancelled (the service aborts it).
    pub(crate) async fn run(mut self) {
        let mut backoff = RECONNECT_INITIAL;
        loop {
            match self.subscribe().await {
                Ok(socket) => {
                    backoff = RECONNECT_INITIAL;
                    self.driver.writer().connected(&self.endpoint);
                    let error = self.consume(socket).await;
                    self.driver.writer().disconnected(&error);
                }
                Err(error) => self.driver.writer().connect_failed(&self.endpoint, &error),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(RECONNECT_MAX);
        }
    }

    async fn subscribe(&self) -> Result<SubSocket, ZmqError> {
        let mut options = SocketOptions::default();
        options.connect_timeout(CONNECT_TIMEOUT);
        let mut socket = SubSocket::with_options(options);
        socket.subscribe(&self.topic).await?;
        socket.connect(&self.endpoint).await?;
        Ok(socket)
    }

    /// Receives until the socket fails; returns why.
    async fn consume(&mut self, mut socket: SubSocket) -> ZmqError {
        let mut monitor = socket.monitor();
        loop {
            tokio::select! {
                message = socket.recv() => match message {
                    Ok(message) => self.driver.on_live(&message.into_vec()).await,
                    Err(error) => return error,
                },
                Some(event) = monitor.next() => match event {
                    SocketEvent::Disconnected(_) => self
                        .driver
                        .writer()
                        .disconnected(&"the publisher went away; reconnecting"),
                    SocketEvent::Connected(..) => {
                        self.driver.writer().connected(&self.endpoint)
                    }
                    _ => {}
                },
            }
        }
    }
}

#[cfg(test)]
mod tests;
