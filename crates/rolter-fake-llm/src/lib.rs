//! `rolter fake-llm`: an OpenAI-compatible engine simulator that behaves like
//! vLLM on the wire, for integration tests, demos and load tests.
//!
//! Its own crate because nothing in it knows the gateway, and it alone uses
//! axum. The `rolter` binary links it all the same: `rolter fake-llm` and
//! `rolter demo` must work from the one binary a newcomer builds, and the
//! tests, the demo and the load tests start engines from that binary. The
//! gateway's code never calls into it (only `main.rs` and `demo.rs` do); it
//! adds the axum stack to the binary's size and nothing to the request path.
//!
//! It serves `/v1/chat/completions`, `/v1/completions`, OpenAI's
//! `/v1/responses` and Anthropic's `/v1/messages` (each streamed as SSE or
//! not, in its own API's shape, as vLLM serves them),
//! `/v1/messages/count_tokens`, `/v1/embeddings`, `/v1/models`, `/health`,
//! `/tokenize` and a few vLLM `/metrics` series. Like vLLM it keeps the
//! Responses it answered (the newest 10,000): `GET`/`DELETE
//! /v1/responses/{id}`, and a `previous_response_id` it does not hold is a
//! 404, so a continuation that reaches the wrong engine fails as it would. Output is deterministic (`tok0 tok1 …`, see
//! [`model`]), paced by a time to first token and a per-token delay.
//!
//! For tests every answer echoes what arrived: the `model` field is the
//! received model name (as vLLM does), non-streaming bodies carry a `fake`
//! object (`engine`, `received_model`, `body_bytes`, `body_sha256`,
//! `received_headers`: every request header, repeated ones joined by ", "), and every
//! response has `x-fake-engine`, `x-fake-body-bytes` and `x-fake-body-sha256`
//! headers — so a test can check that a gateway rewrote `model` and forwarded
//! the body byte for byte.
//!
//! It simulates vLLM's prefix caching ([`kv`]): prompts are tokenized
//! deterministically ([`tokenizer`]; the gateway's tests use [`tokenize`] and
//! [`chat_token_ids`] to know the engine's token ids, and a client outside
//! the process asks `POST /tokenize`, as it would ask vLLM), cut into blocks of
//! `--block-size` tokens held in an LRU of `--kv-blocks` blocks, and only
//! uncached tokens cost prefill time (`--prefill-us-per-token`). Usage
//! reports `prompt_tokens_details.cached_tokens`, and responses carry
//! `x-fake-prompt-tokens` and `x-fake-cached-tokens`. With `--kv-events` the
//! cache's changes are published as vLLM KV events over ZeroMQ (replayable
//! with `--kv-replay`); `GET /fake/occupancy` answers the occupancy signal an
//! LMCache-aware router polls, and `/metrics` adds the cache series.
//!
//! With `--pd-role prefill|decode` (and `--pd-protocol vllm|sglang`) it plays
//! one side of a prefill/decode split and refuses a request whose handshake
//! is missing or wrong ([`disagg`]); `/fake/stats` counts its prefills,
//! verified decodes and refusals under `pd`.
//!
//! Failures are injected at start-up (`--fail-status`, `--fail-delay-ms`,
//! `--hang`, `--reset-after-chunks`, `--retry-after`) or at run time through
//! `POST /fake/control`, which also clears or "restarts" the cache and
//! disturbs the event stream for tests; `GET /fake/stats` counts requests,
//! including the streams a client abandoned (see [`stats`] for when a
//! request counts as finished), the TCP connections it accepted
//! (`connections`), and the cache's hits and events. `/fake/*`
//! requests are not counted and never fail.

mod answer;
mod args;
mod control;
mod disagg;
mod error;
mod handlers;
mod kv;
mod listener;
mod model;
mod model_tokenizer;
mod pooling;
mod request;
mod scheduler;
mod stats;
mod stream;
#[cfg(test)]
mod tests;
mod tokenizer;

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

use args::MAX_OUTPUT_TOKENS;
pub use args::{FakeLlmArgs, KvEncoding, KvHashEncoding, DEFAULT_BLOCK_SIZE};
use control::Mode;
pub use disagg::{PdProtocol, PdRole};
use error::ApiError;
use kv::{BoundSockets, KvState, Publisher, PublisherTasks, ReplayFraming};
use stats::Stats;
pub use tokenizer::{
    chat_text, chat_token_ids, tokenize, IM_END_ID, IM_START_ID, MAX_PIECE_CHARS, VOCAB_SIZE,
};

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
    /// `--max-model-len`: prompt and output together, in tokens.
    max_model_len: u64,
    /// The mode given on the command line, restored by `{"reset": true}`.
    startup: Mode,
    mode: ArcSwap<Mode>,
    stats: Arc<Stats>,
    /// The simulated prefix cache and its event stream.
    kv: KvState,
    /// Text to token ids: simulated, or a model directory's (`--tokenizer`).
    tokenizer: model_tokenizer::Tokenizer,
    /// Prefill slots and the decode batch (`--prefill-slots`, `--decode-slowdown`).
    scheduler: Arc<scheduler::Scheduler>,
    /// Makes response ids unique across engine restarts.
    id_seed: u64,
    next_id: AtomicU64,
    /// Responses API answers kept for `GET /v1/responses/{id}` and
    /// `previous_response_id`, as vLLM keeps them (bounded here).
    responses: answer::ResponseStore,
    /// Its side of a prefill/decode split, with `--pd-role`.
    disagg: Option<disagg::Disagg>,
}

impl Engine {
    fn new(
        args: &FakeLlmArgs,
        http: std::net::SocketAddr,
        publisher: Option<Publisher>,
        tokenizer: model_tokenizer::Tokenizer,
    ) -> Self {
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
            max_model_len: args.max_model_len,
            mode: ArcSwap::from_pointee(startup.clone()),
            startup,
            stats: Arc::new(Stats::default()),
            kv: KvState::new(args, publisher),
            tokenizer,
            scheduler: Arc::new(scheduler::Scheduler::new(
                args.max_num_seqs,
                args.prefill_slots,
                f64::from(args.decode_slowdown_pct) / 100.0,
            )),
            id_seed,
            next_id: AtomicU64::new(0),
            responses: answer::ResponseStore::default(),
            disagg: args
                .pd_role
                .map(|role| disagg::Disagg::new(role, args.pd_protocol, http)),
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

/// Where a bound engine can be reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineAddresses {
    /// The HTTP listener.
    pub http: std::net::SocketAddr,
    /// The KV-event PUB socket, `tcp://HOST:PORT`, with `--kv-events`.
    pub kv_events: Option<String>,
    /// The KV-event replay ROUTER socket, with `--kv-replay`.
    pub kv_replay: Option<String>,
}

/// An engine whose sockets are bound (so its real addresses are known,
/// ports 0 included) but that does not serve yet.
pub struct BoundEngine {
    args: FakeLlmArgs,
    tokenizer: model_tokenizer::Tokenizer,
    listener: TcpListener,
    kv_sockets: Option<BoundSockets>,
    addresses: EngineAddresses,
}

impl BoundEngine {
    /// Binds `--listen` and, if configured, the KV-event sockets.
    pub async fn bind(args: FakeLlmArgs) -> std::io::Result<Self> {
        let listener = TcpListener::bind(&args.listen).await.map_err(|err| {
            std::io::Error::new(
                err.kind(),
                format!("cannot listen on {}: {err}", args.listen),
            )
        })?;
        Self::with_listener(args, listener).await
    }

    /// Uses an already bound HTTP listener and binds the KV-event sockets,
    /// if configured.
    pub async fn with_listener(args: FakeLlmArgs, listener: TcpListener) -> std::io::Result<Self> {
        let http = listener.local_addr()?;
        let tokenizer = match &args.tokenizer {
            Some(dir) => model_tokenizer::Tokenizer::Model(std::sync::Arc::new(
                rolter_tokenize::ModelTokenizer::load(dir).map_err(|e| {
                    std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
                })?,
            )),
            None => model_tokenizer::Tokenizer::Simulated,
        };
        let kv_sockets = match &args.kv_events {
            Some(events) => Some(BoundSockets::bind(events, args.kv_replay.as_deref()).await?),
            None => None,
        };
        let addresses = EngineAddresses {
            http,
            kv_events: kv_sockets.as_ref().map(|s| s.live_endpoint().to_owned()),
            kv_replay: kv_sockets
                .as_ref()
                .and_then(|s| s.replay_endpoint().map(str::to_owned)),
        };
        Ok(BoundEngine {
            args,
            tokenizer,
            listener,
            kv_sockets,
            addresses,
        })
    }

    pub fn addresses(&self) -> &EngineAddresses {
        &self.addresses
    }

    /// Serves until the future is dropped or the process ends. Dropping the
    /// future also closes the connections it accepted and the KV-event
    /// sockets.
    pub async fn serve(self) -> std::io::Result<()> {
        let framing = if self.args.kv_replay_legacy {
            ReplayFraming::Legacy
        } else {
            ReplayFraming::WithTopic
        };
        // Held for as long as this future lives; dropping it stops the
        // KV-event tasks and closes their sockets.
        let (publisher, _publisher_tasks): (Option<Publisher>, Option<PublisherTasks>) =
            match self.kv_sockets {
                Some(sockets) => {
                    let (publisher, tasks) = Publisher::start(
                        sockets,
                        &self.args.kv_topic,
                        self.args.kv_replay_buffer,
                        framing,
                    );
                    (Some(publisher), Some(tasks))
                }
                None => (None, None),
            };
        let engine = Arc::new(Engine::new(
            &self.args,
            self.addresses.http,
            publisher,
            self.tokenizer,
        ));
        // Held for as long as this future lives; dropping it closes every
        // connection (see `listener`).
        let (_serving, closed) = watch::channel(());
        let listener =
            listener::ClosingListener::new(self.listener, closed, Arc::clone(&engine.stats));
        let app = Router::new()
            .fallback(handlers::handle)
            .with_state(engine)
            // Long-context bodies of several MiB must arrive whole.
            .layer(DefaultBodyLimit::disable());
        axum::serve(listener, app).await
    }
}

/// Serve on an already bound listener until the future is dropped or the
/// process ends. Dropping the future also closes the connections it accepted.
/// With `--kv-events`, binds the KV-event sockets first (use [`BoundEngine`]
/// to learn the ports they got).
pub async fn serve(args: FakeLlmArgs, listener: TcpListener) -> std::io::Result<()> {
    BoundEngine::with_listener(args, listener)
        .await?
        .serve()
        .await
}

/// Entry point for `rolter fake-llm`: builds a tokio runtime, binds
/// `--listen` (and the KV-event sockets), prints exactly one line to stdout
/// (flushed) once bound — `fake-llm listening on http://<addr>`, then
/// ` kv-events tcp://<addr>` and ` replay tcp://<addr>` if configured — then
/// serves until Ctrl-C or SIGTERM. Returns the process exit code.
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
        let engine = match BoundEngine::bind(args).await {
            Ok(engine) => engine,
            Err(err) => {
                eprintln!("fake-llm: {err}");
                return 1;
            }
        };
        // Tests and scripts read the real ports from this line.
        if let Err(err) = announce(engine.addresses()) {
            log::warn!("fake-llm: cannot print the listening address: {err}");
        }
        tokio::select! {
            result = engine.serve() => match result {
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

/// The first line of stdout: `fake-llm listening on http://ADDR`, followed
/// by ` kv-events tcp://ADDR` and ` replay tcp://ADDR` when those sockets
/// are bound.
fn announce_line(addresses: &EngineAddresses) -> String {
    let mut line = format!("fake-llm listening on http://{}", addresses.http);
    if let Some(events) = &addresses.kv_events {
        line.push_str(&format!(" kv-events {events}"));
    }
    if let Some(replay) = &addresses.kv_replay {
        line.push_str(&format!(" replay {replay}"));
    }
    line
}

fn announce(addresses: &EngineAddresses) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", announce_line(addresses))?;
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
