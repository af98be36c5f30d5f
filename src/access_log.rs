//! The access log: one line per request on the proxy listeners.
//!
//! The request path never writes. `logging` builds an [`AccessRecord`] and
//! hands it to a bounded queue ([`AccessLogQueue::push`], no waiting); the
//! "access log" background service ([`AccessLogWriter`]) formats the records
//! and writes them in batches, flushing whenever the queue runs dry, so a
//! line is on disk milliseconds after its request ended and a busy gateway
//! still makes one write per batch. When the queue is full (the sink is
//! slower than the traffic, say a blocked stdout pipe) records are dropped
//! and counted in `rolter_access_log_dropped_total{reason="queue_full"}`;
//! lines a write failed on count as `reason="write_error"`. A request never
//! waits for the log.
//!
//! The writer follows the running configuration: `server.access_log`
//! (`stdout`, `off`, a file) and `server.access_log_format` (`json`,
//! `combined`, see [`record`]) take effect on reload, for the lines written
//! after it. A file is opened for appending and reopened on SIGUSR1 (log
//! rotation: rename the file, send SIGUSR1, and new lines go to a new file
//! at the configured path), as nginx's `USR1` does. A file that cannot be
//! opened is retried every second; its lines are dropped and counted
//! meanwhile.
//!
//! Before the process exits after a drain, `signals.rs` calls
//! [`AccessLogQueue::drain`] so the last requests' lines are written.

pub mod record;
mod writer;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Notify};

pub use record::AccessRecord;
pub use writer::{AccessLogWriter, SettingsSource, SERVICE_NAME};

use crate::metrics::{AccessLogDrop, Metrics};

/// Records waiting for the writer; beyond this they are dropped.
pub const QUEUE_CAPACITY: usize = 16 * 1024;

/// What travels to the writer.
enum Entry {
    Record(Box<AccessRecord>),
    /// Answered once every entry queued before it is written and flushed.
    Flush(oneshot::Sender<()>),
}

/// The request path's end of the access log.
pub struct AccessLogQueue {
    sender: mpsc::Sender<Entry>,
    // Taken once, by the writer service when it starts; nobody else locks it.
    receiver: Mutex<Option<mpsc::Receiver<Entry>>>,
    /// SIGUSR1: reopen the file. A permit is kept when the writer is busy.
    reopen: Notify,
    metrics: Arc<Metrics>,
}

impl AccessLogQueue {
    pub fn new(metrics: Arc<Metrics>) -> AccessLogQueue {
        Self::with_capacity(QUEUE_CAPACITY, metrics)
    }

    pub fn with_capacity(capacity: usize, metrics: Arc<Metrics>) -> AccessLogQueue {
        let (sender, receiver) = mpsc::channel(capacity);
        AccessLogQueue {
            sender,
            receiver: Mutex::new(Some(receiver)),
            reopen: Notify::new(),
            metrics,
        }
    }

    /// Queues a record for the writer, or drops and counts it when the queue
    /// is full. Never waits.
    pub fn push(&self, record: AccessRecord) {
        match self.sender.try_send(Entry::Record(Box::new(record))) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.metrics
                    .record_access_log_dropped(AccessLogDrop::QueueFull, 1);
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.metrics
                    .record_access_log_dropped(AccessLogDrop::WriterStopped, 1);
            }
        }
    }

    /// Asks the writer to reopen its file (SIGUSR1).
    pub fn request_reopen(&self) {
        self.reopen.notify_one();
    }

    /// Waits, at most `limit`, until every record queued so far is written
    /// and flushed. Returns whether it was.
    pub async fn drain(&self, limit: Duration) -> bool {
        let (done, written) = oneshot::channel();
        let waited = tokio::time::timeout(limit, async {
            self.sender.send(Entry::Flush(done)).await.ok()?;
            written.await.ok()
        })
        .await;
        matches!(waited, Ok(Some(())))
    }

    fn take_receiver(&self) -> Option<mpsc::Receiver<Entry>> {
        self.receiver
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}
