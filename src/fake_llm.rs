//! `rolter fake-llm`: an OpenAI-compatible engine simulator that behaves like
//! vLLM on the wire, for integration tests, demos and load tests.
//!
//! It serves `/v1/chat/completions`, `/v1/completions` (both streamed as SSE
//! or not), `/v1/embeddings`, `/v1/models`, `/health` and a few vLLM
//! `/metrics` series. Output is deterministic (`tok0 tok1 …`, see
//! [`model`]), paced by a time to first token and a per-token delay.
//!
//! For tests every answer echoes what arrived: the `model` field is the
//! received model name (as vLLM does), non-streaming bodies carry a `fake`
//! object (`engine`, `received_model`, `body_bytes`, `body_sha256`), and every
//! response has `x-fake-engine`, `x-fake-body-bytes` and `x-fake-body-sha256`
//! headers — so a test can check that a gateway rewrote `model` and forwarded
//! the body byte for byte.
//!
//! Failures are injected at start-up (`--fail-status`, `--fail-delay-ms`,
//! `--hang`, `--reset-after-chunks`, `--retry-after`) or at run time through
//! `POST /fake/control`; `GET /fake/stats` counts requests, including the
//! streams a client abandoned (see [`stats`] for when a request counts as
//! finished). `/fake/*` requests are not counted and never fail.

mod args;
mod control;
mod error;
mod handlers;
mod listener;
mod model;
mod request;
mod stats;
mod stream;
#[cfg(test)]
mod tests;

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use axum::extract::DefaultBodyLimit;
use axum::http::HeaderValue;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use args::FakeLlmArgs;
use args::MAX_OUTPUT_TOKENS;
use control::Mode;
use error::ApiError;
use stats::Stats;

/// The model `/v1/models` lists when no `--model` is given.
const ANY_MODEL_LISTED_AS: &str = "fake-model";

/// One simulated engine: its configuration, run-time mode and counters.
struct Engine {
    name: String,
    /// `name` as a header value; `None` if the name cannot be one.
    name_header: Option<HeaderValue>,
    /// Models served; empty means any.
    models: Vec<String>,
    /// Output length for requests without `max_tokens`.
    default_tokens: u32,
    /// The mode given on the command line, restored by `{"reset": true}`.
    startup: Mode,
    mode: ArcSwap<Mode>,
    stats: Arc<Stats>,
    /// Makes response ids unique across engine restarts.
    id_seed: u64,
    next_id: AtomicU64,
}

impl Engine {
    fn new(args: &FakeLlmArgs) -> Self {
        let name_header = HeaderValue::from_str(&args.name).ok();
        if name_header.is_none() {
            log::warn!(
                "fake-llm: engine name {:?} cannot be sent as x-fake-engine",
                args.name
            );
        }
        let startup = Mode::from_args(args);
        let id_seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |t| t.as_nanos() as u64);
        Engine {
            name: args.name.clone(),
            name_header,
            models: args.model.clone(),
            default_tokens: args.max_tokens.clamp(1, MAX_OUTPUT_TOKENS),
            mode: ArcSwap::from_pointee(startup.clone()),
            startup,
            stats: Arc::new(Stats::default()),
            id_seed,
            next_id: AtomicU64::new(0),
        }
    }

    /// vLLM's 404 for a model it does not serve.
    fn check_model(&self, model: &str) -> Result<(), ApiError> {
        if self.models.is_empty() || self.models.iter().any(|served| served == model) {
            Ok(())
        } else {
            Err(ApiError::unknown_model(model))
        }
    }

    /// The models `/v1/models` lists.
    fn listed_models(&self) -> Vec<String> {
        if self.models.is_empty() {
            vec![ANY_MODEL_LISTED_AS.to_owned()]
        } else {
            self.models.clone()
        }
    }

    /// A fresh id like vLLM's: `<prefix>-` and 32 hex digits.
    fn response_id(&self, prefix: &str) -> String {
        let serial = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}-{:016x}{serial:016x}", self.id_seed)
    }
}

/// Serve on an already bound listener until the future is dropped or the
/// process ends. Dropping the future also closes the connections it accepted.
pub async fn serve(args: FakeLlmArgs, listener: TcpListener) -> std::io::Result<()> {
    let engine = Arc::new(Engine::new(&args));
    // Held for as long as this future lives; dropping it closes every
    // connection (see `listener`).
    let (_serving, closed) = watch::channel(());
    let app = Router::new()
        .fallback(handlers::handle)
        .with_state(engine)
        // Long-context bodies of several MiB must arrive whole.
        .layer(DefaultBodyLimit::disable());
    axum::serve(listener::ClosingListener::new(listener, closed), app).await
}

/// Entry point for `rolter fake-llm`: builds a tokio runtime, binds
/// `--listen`, prints exactly one line `fake-llm listening on http://<addr>` to
/// stdout (flushed) once bound, then serves until Ctrl-C or SIGTERM. Returns
/// the process exit code.
pub fn run(args: FakeLlmArgs) -> i32 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("fake-llm: cannot start the async runtime: {err}");
            return 1;
        }
    };
    runtime.block_on(async move {
        let listener = match TcpListener::bind(&args.listen).await {
            Ok(listener) => listener,
            Err(err) => {
                eprintln!("fake-llm: cannot listen on {}: {err}", args.listen);
                return 1;
            }
        };
        let addr = match listener.local_addr() {
            Ok(addr) => addr,
            Err(err) => {
                eprintln!(
                    "fake-llm: cannot read the bound address of {}: {err}",
                    args.listen
                );
                return 1;
            }
        };
        // Tests and scripts read the real port from this line.
        if let Err(err) = announce(addr) {
            log::warn!("fake-llm: cannot print the listening address: {err}");
        }
        tokio::select! {
            result = serve(args, listener) => match result {
                Ok(()) => 0,
                Err(err) => {
                    eprintln!("fake-llm: server failed: {err}");
                    1
                }
            },
            () = shutdown_signal() => 0,
        }
    })
}

fn announce(addr: std::net::SocketAddr) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "fake-llm listening on http://{addr}")?;
    stdout.flush()
}

/// Completes on Ctrl-C or (on Unix) SIGTERM; never if neither can be watched.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            log::warn!("fake-llm: cannot watch Ctrl-C: {err}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                log::warn!("fake-llm: cannot watch SIGTERM: {err}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
