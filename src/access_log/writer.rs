//! The "access log" background service: drains the queue into the sink the
//! running configuration names (see the module doc of `access_log`).
//!
//! Writes are plain blocking writes: the service has its own runtime thread
//! (Pingora gives each background service one), so a slow disk or a full
//! stdout pipe stalls only this loop, and the queue in front of it drops
//! rather than letting a request wait.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use super::{AccessLogQueue, Entry};
use crate::config::{AccessLog, AccessLogFormat};
use crate::metrics::{AccessLogDrop, Metrics};
use crate::wake::Changes;

/// The service's name in Pingora.
pub const SERVICE_NAME: &str = "access log";

/// Records formatted and written at once, at most.
const BATCH: usize = 512;

/// How soon the writer retries a file it could not open.
const RETRY: Duration = Duration::from_secs(1);

/// Reads the running configuration's `server.access_log` and
/// `server.access_log_format`.
pub type SettingsSource = Box<dyn Fn() -> (AccessLog, AccessLogFormat) + Send + Sync>;

pub struct AccessLogWriter {
    queue: Arc<AccessLogQueue>,
    settings: SettingsSource,
    metrics: Arc<Metrics>,
    changes: Changes,
}

impl AccessLogWriter {
    /// Drains `queue` where `settings` says, following them at every batch
    /// and whenever `changes` moves.
    pub fn new(
        queue: Arc<AccessLogQueue>,
        settings: SettingsSource,
        metrics: Arc<Metrics>,
        changes: Changes,
    ) -> Self {
        Self {
            queue,
            settings,
            metrics,
            changes,
        }
    }

    /// Points the sink where the running configuration says; returns the
    /// configured line format.
    fn follow_configuration(&self, sink: &mut Sink) -> AccessLogFormat {
        let (log, format) = (self.settings)();
        sink.follow(&log);
        format
    }
}

#[async_trait]
impl BackgroundService for AccessLogWriter {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let queue = &self.queue;
        let Some(mut receiver) = queue.take_receiver() else {
            log::error!("the access log writer was started twice; this one stops");
            return;
        };
        let mut sink = Sink::default();
        let mut entries = Vec::with_capacity(BATCH);
        let mut buf = Vec::with_capacity(64 * 1024);
        // Opened at once, not at the first line.
        self.follow_configuration(&mut sink);
        let mut changes = self.changes.clone();
        // False once the state that counts snapshots is gone.
        let mut following = true;
        let mut stopping = false;
        loop {
            let retry = sink.retry_in();
            tokio::select! {
                received = receiver.recv_many(&mut entries, BATCH) => {
                    if received == 0 {
                        break;
                    }
                    // The configuration as it is now: a reload applies to
                    // the very next line.
                    let format = self.follow_configuration(&mut sink);
                    write_batch(&mut sink, format, &mut entries, &mut buf, &self.metrics);
                }
                _ = queue.reopen.notified() => sink.reopen(),
                // A reload that turns the log off or moves it applies
                // at once, not only at the next line.
                changed = changes.changed(), if following => {
                    following = changed.is_ok();
                    self.follow_configuration(&mut sink);
                }
                () = tokio::time::sleep(retry.unwrap_or_default()), if retry.is_some() => {
                    self.follow_configuration(&mut sink);
                }
                // Keep writing after the shutdown broadcast: requests still
                // streaming log when they end, and the process exits only
                // after draining this queue (`signals.rs`).
                _ = shutdown.changed(), if !stopping => stopping = true,
            }
        }
    }
}

/// Formats the batch, writes it in one go, then answers the flush requests
/// in it.
fn write_batch(
    sink: &mut Sink,
    format: AccessLogFormat,
    entries: &mut Vec<Entry>,
    buf: &mut Vec<u8>,
    metrics: &Metrics,
) {
    buf.clear();
    let mut lines = 0u64;
    let mut flushed = Vec::new();
    for entry in entries.drain(..) {
        match entry {
            Entry::Record(record) if sink.is_on() => {
                record.write_line(format, buf);
                lines += 1;
            }
            // `off`: discarded, by configuration rather than by failure.
            Entry::Record(_) => {}
            Entry::Flush(done) => flushed.push(done),
        }
    }
    if lines > 0 {
        if let Err(e) = sink.write(buf) {
            metrics.record_access_log_dropped(AccessLogDrop::WriteError, lines);
            sink.failed(&e);
        } else {
            sink.succeeded();
        }
    }
    for done in flushed {
        // The waiter may have given up (its timeout); nothing to tell it then.
        done.send(()).ok();
    }
}

enum Output {
    Stdout,
    File(File),
}

/// Where lines go: the configured destination and its open handle.
struct Sink {
    /// The destination the output was opened for.
    config: AccessLog,
    /// `None` when `off`, or when the file could not be opened.
    output: Option<Output>,
    /// When to try opening the file again.
    retry_at: Option<Instant>,
    /// Writes are failing (logged once per failure streak).
    failing: bool,
}

impl Default for Sink {
    fn default() -> Self {
        Sink {
            config: AccessLog::Off,
            output: None,
            retry_at: None,
            failing: false,
        }
    }
}

impl Sink {
    fn is_on(&self) -> bool {
        self.config != AccessLog::Off
    }

    /// How long until a file that could not be opened is tried again;
    /// `None` when nothing waits for a retry.
    fn retry_in(&self) -> Option<Duration> {
        let at = self.retry_at?;
        self.output
            .is_none()
            .then(|| at.saturating_duration_since(Instant::now()))
    }

    /// Switches to `wanted` when the configuration changed; retries a file
    /// that could not be opened.
    fn follow(&mut self, wanted: &AccessLog) {
        if *wanted != self.config {
            self.config = wanted.clone();
            self.output = None;
            self.retry_at = None;
            self.open();
            match &self.config {
                AccessLog::Off => log::info!("access log off"),
                AccessLog::Stdout => log::info!("access log to stdout"),
                AccessLog::File(path) if self.output.is_some() => {
                    log::info!("access log to {}", path.display())
                }
                AccessLog::File(_) => {}
            }
        } else if self.output.is_none() && self.retry_at.is_some_and(|at| Instant::now() >= at) {
            self.open();
            if let (Some(_), AccessLog::File(path)) = (&self.output, &self.config) {
                log::info!("access log file {} opened", path.display());
            }
        }
    }

    fn open(&mut self) {
        self.output = match &self.config {
            AccessLog::Off => None,
            AccessLog::Stdout => Some(Output::Stdout),
            AccessLog::File(path) => match open_append(path) {
                Ok(file) => {
                    self.retry_at = None;
                    Some(Output::File(file))
                }
                Err(e) => {
                    log::error!(
                        "cannot open the access log {}: {e}; lines are dropped until it opens",
                        path.display()
                    );
                    self.retry_at = Some(Instant::now() + RETRY);
                    None
                }
            },
        };
    }

    /// SIGUSR1: opens the configured file anew (after a rotation renamed
    /// it). On failure the previous file stays in use.
    fn reopen(&mut self) {
        let AccessLog::File(path) = &self.config else {
            log::info!("SIGUSR1: the access log is not a file; nothing to reopen");
            return;
        };
        match open_append(path) {
            Ok(file) => {
                self.output = Some(Output::File(file));
                self.retry_at = None;
                log::info!("access log {} reopened", path.display());
            }
            Err(e) => log::error!(
                "cannot reopen the access log {}: {e}; still writing to the previous file",
                path.display()
            ),
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut self.output {
            Some(Output::Stdout) => {
                let mut stdout = io::stdout().lock();
                stdout.write_all(buf)?;
                stdout.flush()
            }
            // A `File` is unbuffered: `write_all` reaches the kernel.
            Some(Output::File(file)) => file.write_all(buf),
            None => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the access log file is not open",
            )),
        }
    }

    fn failed(&mut self, error: &io::Error) {
        if !std::mem::replace(&mut self.failing, true) {
            log::error!("writing the access log failed: {error}; dropping lines");
        }
    }

    fn succeeded(&mut self) {
        if std::mem::replace(&mut self.failing, false) {
            log::info!("writing the access log works again");
        }
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::access_log::AccessRecord;

    fn record(id: &str) -> Entry {
        Entry::Record(Box::new(AccessRecord {
            time: UNIX_EPOCH,
            request_id: id.to_string(),
            client: None,
            peer: None,
            method: "GET".into(),
            path: "/v1/models".into(),
            protocol: "HTTP/1.1",
            status: 200,
            key: None,
            model: None,
            route: None,
            strategy: None,
            target: None,
            prefill_target: None,
            attempts: 0,
            upstream_status: None,
            bytes_sent: 0,
            request_bytes: 0,
            ttfb: None,
            total: Duration::ZERO,
            client_cancel: false,
            prompt_tokens: None,
            cached_tokens: None,
            completion_tokens: None,
            error: None,
            referer: None,
            user_agent: None,
        }))
    }

    fn write(sink: &mut Sink, ids: &[&str], metrics: &Metrics) {
        let mut entries: Vec<Entry> = ids.iter().map(|id| record(id)).collect();
        write_batch(
            sink,
            AccessLogFormat::Json,
            &mut entries,
            &mut Vec::new(),
            metrics,
        );
    }

    fn ids_in(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["request_id"].as_str().unwrap().to_string()
            })
            .collect()
    }

    #[test]
    fn reopen_after_a_rename_starts_a_new_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let rotated = dir.path().join("access.log.1");
        let metrics = Metrics::new();
        let mut sink = Sink::default();
        sink.follow(&AccessLog::File(path.clone()));
        write(&mut sink, &["a"], &metrics);
        std::fs::rename(&path, &rotated).unwrap();
        write(&mut sink, &["b"], &metrics);
        sink.reopen();
        write(&mut sink, &["c"], &metrics);
        assert_eq!(ids_in(&rotated), ["a", "b"]);
        assert_eq!(ids_in(&path), ["c"]);
    }

    #[test]
    fn the_sink_follows_the_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("first.log");
        let second = dir.path().join("second.log");
        let metrics = Metrics::new();
        let mut sink = Sink::default();
        sink.follow(&AccessLog::File(first.clone()));
        write(&mut sink, &["a"], &metrics);
        sink.follow(&AccessLog::Off);
        write(&mut sink, &["off"], &metrics);
        sink.follow(&AccessLog::File(second.clone()));
        write(&mut sink, &["b"], &metrics);
        assert_eq!(ids_in(&first), ["a"]);
        assert_eq!(ids_in(&second), ["b"]);
        assert_eq!(metrics.access_log_dropped(AccessLogDrop::WriteError), 0);
    }

    #[test]
    fn lines_for_a_file_that_cannot_open_are_counted_and_it_is_retried() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("later");
        let path = missing.join("access.log");
        let metrics = Metrics::new();
        let mut sink = Sink::default();
        sink.follow(&AccessLog::File(path.clone()));
        write(&mut sink, &["lost", "lost too"], &metrics);
        assert_eq!(metrics.access_log_dropped(AccessLogDrop::WriteError), 2);
        // The writer sleeps until the retry, at most RETRY from now.
        let wait = sink.retry_in().expect("a retry is due");
        assert!(wait <= RETRY, "{wait:?}");
        std::fs::create_dir(&missing).unwrap();
        sink.retry_at = Some(Instant::now());
        sink.follow(&AccessLog::File(path.clone()));
        write(&mut sink, &["kept"], &metrics);
        assert_eq!(ids_in(&path), ["kept"]);
        assert_eq!(sink.retry_in(), None, "open: nothing to retry");
    }
}
