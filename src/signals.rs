//! Process signals the gateway acts on, as one named background service.
//! (Pingora itself handles SIGQUIT, SIGTERM and SIGINT for the server's
//! life cycle; this service adds rolter's part.)
//!
//! - SIGHUP: reload the configuration.
//! - SIGUSR1: reopen the access log file (log rotation, as nginx's USR1).
//! - SIGQUIT (graceful upgrade) and SIGTERM (graceful stop): start draining.
//!   Pingora keeps serving for a few seconds before it drops idle keep-alive
//!   connections; answering every response in that window with
//!   `Connection: close` moves clients off this process first, so none sends
//!   a request on a connection that is about to be closed under it.
//! - SIGTERM also turns `/readyz` to 503: this node is going away, whereas
//!   after SIGQUIT its successor keeps the same sockets.
//! - Once the server stops accepting (Pingora's shutdown broadcast), the
//!   process exits as soon as no proxy request is active. Pingora itself
//!   would wait out the whole `grace_period_seconds` and then drop whatever
//!   is still streaming; LLM streams run for minutes, so the grace period is
//!   set long (the longest stream to wait for) and this ends it early,
//!   after the access log has written the last requests' lines.

use std::sync::Arc;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::reload::Reloader;
use crate::state::GatewayState;

/// How often the drain checks for active requests.
const DRAIN_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// Longest wait for the access log's last lines before exiting.
const ACCESS_LOG_DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

pub struct SignalService {
    state: Arc<GatewayState>,
    reloader: Reloader,
}

impl SignalService {
    pub fn new(state: Arc<GatewayState>, reloader: Reloader) -> Self {
        Self { state, reloader }
    }
}

fn listen(kind: SignalKind, name: &str) -> Option<Signal> {
    match signal(kind) {
        Ok(s) => Some(s),
        Err(e) => {
            log::error!("cannot listen for {name}: {e}");
            None
        }
    }
}

/// Waits for the next delivery, or forever when the signal is not available.
async fn next(signal: &mut Option<Signal>) {
    match signal {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

#[async_trait]
impl BackgroundService for SignalService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut hangup = listen(
            SignalKind::hangup(),
            "SIGHUP (reload only through the admin API)",
        );
        let mut quit = listen(SignalKind::quit(), "SIGQUIT");
        let mut terminate = listen(SignalKind::terminate(), "SIGTERM");
        let mut user1 = listen(
            SignalKind::user_defined1(),
            "SIGUSR1 (the access log is not reopened)",
        );
        loop {
            tokio::select! {
                _ = next(&mut hangup) => {
                    log::info!("SIGHUP: reloading configuration");
                    // The outcome is logged and counted by the reload itself.
                    let _outcome = self.reloader.reload().await;
                }
                _ = next(&mut quit) => {
                    log::info!("SIGQUIT: draining connections for the upgrade");
                    self.state.begin_draining();
                }
                _ = next(&mut terminate) => {
                    log::info!("SIGTERM: draining connections, readiness off");
                    self.state.begin_draining();
                    self.state.begin_shutdown();
                }
                _ = next(&mut user1) => {
                    log::info!("SIGUSR1: reopening the access log");
                    self.state.access_log.request_reopen();
                }
                _ = shutdown.changed() => {
                    self.state.begin_draining();
                    break;
                }
            }
        }
        let active = self.state.active_requests();
        log::info!("no longer accepting; waiting for {active} active requests");
        loop {
            if self.state.active_requests() == 0 {
                if !self.state.access_log.drain(ACCESS_LOG_DRAIN).await {
                    log::warn!("the access log did not flush its last lines in time");
                }
                log::info!("all requests finished; exiting");
                std::process::exit(0);
            }
            tokio::time::sleep(DRAIN_POLL).await;
        }
    }
}
