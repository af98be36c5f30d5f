//! Prefill/decode disaggregation (`--pd-role`, `--pd-protocol`): the engine
//! plays one side of a split deployment and checks the handshake a router
//! must carry between the two, so a test sees a wrong or missing one as the
//! real engines would show it: a refused request.
//!
//! vLLM (its NIXL connector, driven by vLLM's own disaggregation proxy): the
//! router sends the request to a prefill engine with `max_tokens = 1`,
//! `stream = false` and `kv_transfer_params.do_remote_decode = true`; the
//! answer's `kv_transfer_params` names where the KV blocks are held
//! (`remote_host`, `remote_port`, `remote_request_id`, ...). The decode engine
//! gets the original request with those parameters and pulls the blocks from
//! the prefill engine. Here the pull is `GET /fake/kv/{id}` on the prefill
//! engine: the handle is given out once, with the digest of the prompt it
//! was computed for, which the decode engine compares with its own.
//!
//! A decode engine serves a request that carries no handshake at all whole
//! (counted as `whole`), as vLLM's and SGLang's do: a router sends short
//! prompts there directly. One with a handshake that does not check out is
//! refused.
//!
//! SGLang (PD mode): the router picks both engines, adds `bootstrap_host`,
//! `bootstrap_port` (the prefill engine's bootstrap server) and a fresh
//! `bootstrap_room` to the request and sends it to both at once. The prefill
//! engine registers the room; the decode engine waits on the bootstrap
//! server for it (`GET /fake/bootstrap/{room}` here, served on the HTTP
//! port) and compares digests the same way.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::error::ApiError;

/// Which side of a split deployment the engine is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PdRole {
    /// Computes a prompt's KV cache and hands it over.
    Prefill,
    /// Generates from a KV cache another engine computed.
    Decode,
}

/// Whose handshake the engine speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PdProtocol {
    /// `kv_transfer_params`, prefill first, then decode.
    Vllm,
    /// `bootstrap_host`/`bootstrap_port`/`bootstrap_room`, both at once.
    Sglang,
}

/// Handles (vLLM) or rooms (SGLang) a prefill engine holds at most; the
/// oldest goes first, as an engine frees blocks nobody pulled.
const MAX_HELD: usize = 10_000;
/// How long a decode engine waits for its room to appear (SGLang).
const BOOTSTRAP_WAIT: Duration = Duration::from_secs(10);
/// Bound on each step of a pull from the other engine.
const PULL_TIMEOUT: Duration = Duration::from_secs(5);

/// One engine's side of the handshake and what it saw.
pub(crate) struct Disagg {
    pub(crate) role: PdRole,
    protocol: PdProtocol,
    /// This engine's HTTP address, given out in vLLM's handle and expected
    /// as SGLang's bootstrap address.
    host: String,
    port: u16,
    held: Mutex<Held>,
    prefilled: AtomicU64,
    decoded: AtomicU64,
    whole: AtomicU64,
    refused: AtomicU64,
}

#[derive(Default)]
struct Held {
    digests: HashMap<String, u64>,
    order: VecDeque<String>,
}

/// What a checked request becomes.
pub(crate) enum Checked {
    /// A prefill: answer it, adding these top-level fields (vLLM's
    /// `kv_transfer_params`, or nothing for SGLang).
    Prefilled(Option<Value>),
    /// A decode whose KV cache arrived: no prefill time.
    Decoded,
    /// A request with no handshake at all, which a decode engine serves
    /// whole, as vLLM's and SGLang's do (a router's short prompts).
    Whole,
}

impl Disagg {
    pub(crate) fn new(role: PdRole, protocol: PdProtocol, addr: std::net::SocketAddr) -> Self {
        Disagg {
            role,
            protocol,
            host: addr.ip().to_string(),
            port: addr.port(),
            held: Mutex::new(Held::default()),
            prefilled: AtomicU64::new(0),
            decoded: AtomicU64::new(0),
            whole: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Checks a generation request's handshake fields (`fields` is its
    /// body) for this engine's role; `digest` identifies its prompt and
    /// `id` is the answer's id.
    pub(crate) async fn check(
        &self,
        fields: &Value,
        digest: u64,
        output_tokens: u32,
        stream: bool,
        id: &str,
    ) -> Result<Checked, ApiError> {
        let checked = match (self.role, self.protocol) {
            (PdRole::Prefill, PdProtocol::Vllm) => {
                self.vllm_prefill(fields, digest, output_tokens, stream, id)
            }
            (PdRole::Decode, PdProtocol::Vllm) => self.vllm_decode(fields, digest).await,
            (PdRole::Prefill, PdProtocol::Sglang) => self.sglang_prefill(fields, digest),
            (PdRole::Decode, PdProtocol::Sglang) => self.sglang_decode(fields, digest).await,
        };
        match &checked {
            Ok(Checked::Prefilled(_)) => self.prefilled.fetch_add(1, Ordering::Relaxed),
            Ok(Checked::Decoded) => self.decoded.fetch_add(1, Ordering::Relaxed),
            Ok(Checked::Whole) => self.whole.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.refused.fetch_add(1, Ordering::Relaxed),
        };
        checked
    }

    fn vllm_prefill(
        &self,
        fields: &Value,
        digest: u64,
        output_tokens: u32,
        stream: bool,
        id: &str,
    ) -> Result<Checked, ApiError> {
        let params = &fields["kv_transfer_params"];
        if params["do_remote_decode"] != Value::Bool(true) {
            return Err(ApiError::bad_request(
                Some("kv_transfer_params"),
                "prefill engine: kv_transfer_params.do_remote_decode must be true",
            ));
        }
        if output_tokens != 1 || stream {
            return Err(ApiError::bad_request(
                Some("max_tokens"),
                "prefill engine: a remote-decode request has max_tokens 1 and stream false",
            ));
        }
        self.hold(id, digest);
        Ok(Checked::Prefilled(Some(json!({
            "do_remote_prefill": true,
            "do_remote_decode": false,
            "remote_engine_id": format!("fake-{}", self.port),
            "remote_block_ids": [0],
            "remote_host": self.host,
            "remote_port": self.port,
            "remote_request_id": id,
            "tp_size": 1,
        }))))
    }

    async fn vllm_decode(&self, fields: &Value, digest: u64) -> Result<Checked, ApiError> {
        let params = &fields["kv_transfer_params"];
        if params.is_null() {
            return Ok(Checked::Whole);
        }
        let refuse = |message: String| ApiError::bad_request(Some("kv_transfer_params"), message);
        if params["do_remote_prefill"] != Value::Bool(true) {
            return Err(refuse(
                "decode engine: kv_transfer_params.do_remote_prefill must be true".into(),
            ));
        }
        let (Some(host), Some(port), Some(handle)) = (
            params["remote_host"].as_str(),
            params["remote_port"]
                .as_u64()
                .and_then(|p| u16::try_from(p).ok()),
            params["remote_request_id"].as_str(),
        ) else {
            return Err(refuse(
                "decode engine: kv_transfer_params needs remote_host, remote_port and remote_request_id".into(),
            ));
        };
        let held = pull(host, port, &format!("/fake/kv/{handle}"))
            .await
            .map_err(|e| {
                refuse(format!(
                    "decode engine: KV transfer from {host}:{port} failed: {e}"
                ))
            })?;
        if held != digest {
            return Err(refuse(
                "decode engine: the transferred KV cache is for another prompt".into(),
            ));
        }
        Ok(Checked::Decoded)
    }

    fn sglang_prefill(&self, fields: &Value, digest: u64) -> Result<Checked, ApiError> {
        let room = bootstrap(fields)?;
        if room.host != self.host || room.port != self.port {
            return Err(ApiError::bad_request(
                Some("bootstrap_host"),
                format!(
                    "prefill engine: the bootstrap server is {}:{}, not {}:{}",
                    self.host, self.port, room.host, room.port
                ),
            ));
        }
        self.hold(&room.room.to_string(), digest);
        Ok(Checked::Prefilled(None))
    }

    async fn sglang_decode(&self, fields: &Value, digest: u64) -> Result<Checked, ApiError> {
        let handshake = ["bootstrap_host", "bootstrap_port", "bootstrap_room"];
        if handshake.iter().all(|name| fields[*name].is_null()) {
            return Ok(Checked::Whole);
        }
        let room = bootstrap(fields)?;
        let path = format!("/fake/bootstrap/{}", room.room);
        let deadline = Instant::now() + BOOTSTRAP_WAIT;
        let held = loop {
            match pull(&room.host, room.port, &path).await {
                Ok(held) => break held,
                Err(PullError::NotHeld) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => {
                    return Err(ApiError::bad_request(
                        Some("bootstrap_room"),
                        format!(
                            "decode engine: bootstrap room {} never arrived: {e}",
                            room.room
                        ),
                    ))
                }
            }
        };
        if held != digest {
            return Err(ApiError::bad_request(
                Some("bootstrap_room"),
                "decode engine: the bootstrap room holds another prompt",
            ));
        }
        Ok(Checked::Decoded)
    }

    fn hold(&self, key: &str, digest: u64) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if held.digests.insert(key.to_owned(), digest).is_none() {
            held.order.push_back(key.to_owned());
        }
        while held.order.len() > MAX_HELD {
            if let Some(oldest) = held.order.pop_front() {
                held.digests.remove(&oldest);
            }
        }
    }

    /// `GET /fake/kv/{id}` and `/fake/bootstrap/{room}`: the prompt digest a
    /// handle or room holds, given out once.
    pub(crate) fn take(&self, key: &str) -> Option<u64> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let digest = held.digests.remove(key)?;
        held.order.retain(|k| k != key);
        Some(digest)
    }

    /// The `pd` object of `/fake/stats`.
    pub(crate) fn stats_json(&self) -> Value {
        json!({
            "role": match self.role { PdRole::Prefill => "prefill", PdRole::Decode => "decode" },
            "protocol": match self.protocol { PdProtocol::Vllm => "vllm", PdProtocol::Sglang => "sglang" },
            "prefilled": self.prefilled.load(Ordering::Relaxed),
            "decoded": self.decoded.load(Ordering::Relaxed),
            "whole": self.whole.load(Ordering::Relaxed),
            "refused": self.refused.load(Ordering::Relaxed),
        })
    }
}

/// SGLang's three bootstrap fields.
struct Room {
    host: String,
    port: u16,
    room: u64,
}

fn bootstrap(fields: &Value) -> Result<Room, ApiError> {
    let host = fields["bootstrap_host"].as_str();
    let port = fields["bootstrap_port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok());
    let room = fields["bootstrap_room"].as_u64();
    match (host, port, room) {
        (Some(host), Some(port), Some(room)) => Ok(Room {
            host: host.to_owned(),
            port,
            room,
        }),
        _ => Err(ApiError::bad_request(
            Some("bootstrap_room"),
            "disaggregated engine: bootstrap_host, bootstrap_port and bootstrap_room are required",
        )),
    }
}

/// The digest of a prompt's token ids.
pub(crate) fn prompt_digest(prompts: &[Vec<u32>]) -> u64 {
    let mut bytes = Vec::new();
    for prompt in prompts {
        for id in prompt {
            bytes.extend_from_slice(&id.to_le_bytes());
        }
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
    }
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

#[derive(Debug)]
enum PullError {
    /// The other engine answered 404: not (yet) there, or already taken.
    NotHeld,
    Failed(String),
}

impl std::fmt::Display for PullError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PullError::NotHeld => f.write_str("not held there"),
            PullError::Failed(why) => f.write_str(why),
        }
    }
}

/// One `GET path` to the other engine, answered `{"digest": N}`.
async fn pull(host: &str, port: u16, path: &str) -> Result<u64, PullError> {
    let failed = |e: &dyn std::fmt::Display| PullError::Failed(e.to_string());
    let mut stream = tokio::time::timeout(PULL_TIMEOUT, TcpStream::connect((host, port)))
        .await
        .map_err(|e| failed(&e))?
        .map_err(|e| failed(&e))?;
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| failed(&e))?;
    let mut answer = Vec::new();
    tokio::time::timeout(
        PULL_TIMEOUT,
        (&mut stream).take(64 * 1024).read_to_end(&mut answer),
    )
    .await
    .map_err(|e| failed(&e))?
    .map_err(|e| failed(&e))?;
    let text = String::from_utf8_lossy(&answer);
    let status = text.split(' ').nth(1).unwrap_or_default();
    if status == "404" {
        return Err(PullError::NotHeld);
    }
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["digest"].as_u64())
        .filter(|_| status == "200")
        .ok_or_else(|| PullError::Failed(format!("answered {status}")))
}
