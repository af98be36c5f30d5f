//! Command-line options of `rolter fake-llm`.

use crate::disagg::{PdProtocol, PdRole};
use clap::builder::{RangedI64ValueParser, RangedU64ValueParser};

/// The largest `max_tokens` the fake engine accepts at all: a larger one is
/// a 400, not an allocation the process cannot survive. Whether prompt and
/// output fit the context is `--max-model-len`'s check.
pub const MAX_OUTPUT_TOKENS: u32 = 131_072;
/// `--max-model-len` by default: a common context length of today's
/// models (Llama 3.1, Qwen3 with YaRN).
pub const DEFAULT_MAX_MODEL_LEN: u64 = 131_072;

/// Tokens per KV-cache block unless `--block-size` says otherwise (vLLM's
/// default).
pub const DEFAULT_BLOCK_SIZE: usize = 16;

/// How KV-event batches and events are encoded (`--kv-encoding`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvEncoding {
    /// `[ts, events, data_parallel_rank]`, events `["BlockStored", …]`.
    #[default]
    Array,
    /// `{ts, events, data_parallel_rank}`, events `{"type": "BlockStored", …}`.
    Map,
}

/// How block hashes are sent (`--kv-hash-encoding`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvHashEncoding {
    /// Unsigned 64-bit integers.
    #[default]
    U64,
    /// Negative signed 64-bit integers (the hash with its top bit set).
    I64,
    /// 32-byte binary strings.
    Bytes,
}

/// Command-line options of `rolter fake-llm` (clap::Args, so the CLI can embed
/// it as a subcommand). `Default` gives the same values as an empty command
/// line, so code can write `FakeLlmArgs { ttft_ms: 50, ..Default::default() }`.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct FakeLlmArgs {
    /// Address to listen on, `host:port` (port 0 picks a free port; the real
    /// address is printed on the first line of stdout).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8000")]
    pub listen: String,

    /// Engine name, reported in the `x-fake-engine` header and in the `fake`
    /// object of non-streaming responses.
    #[arg(long, value_name = "NAME", default_value = "fake-llm")]
    pub name: String,

    /// A model this engine serves (repeatable). Requests for other models get
    /// vLLM's 404. With none, any model is accepted and /v1/models lists
    /// "fake-model".
    #[arg(long = "model", value_name = "NAME")]
    pub model: Vec<String>,

    /// Time to first token, in milliseconds.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub ttft_ms: u64,

    /// Milliseconds added to the time to first token per generation request
    /// already running when this one arrives: a queue that delays the first
    /// token, while a stream's headers still go out at once (as vLLM's do).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub queue_ttft_ms: u64,

    /// Delay between generated tokens, in milliseconds (streamed or not).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub token_delay_ms: u64,

    /// Output length, in tokens, when a request gives no `max_tokens`.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 16,
        value_parser = RangedI64ValueParser::<u32>::new().range(1..=i64::from(MAX_OUTPUT_TOKENS))
    )]
    pub max_tokens: u32,

    /// The longest sequence, prompt and output together, in tokens (vLLM's
    /// `--max-model-len`). A longer request gets vLLM's 400; `/v1/models`
    /// and `/tokenize` report it.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_MAX_MODEL_LEN,
        value_parser = RangedU64ValueParser::<u64>::new().range(1..=(1 << 32))
    )]
    pub max_model_len: u64,

    /// Answer every request with this HTTP status and an OpenAI-style error body.
    #[arg(
        long,
        value_name = "CODE",
        value_parser = RangedI64ValueParser::<u16>::new().range(200..=599)
    )]
    pub fail_status: Option<u16>,

    /// Delay, in milliseconds, before answering any request.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub fail_delay_ms: u64,

    /// Accept requests and never answer them.
    #[arg(long)]
    pub hang: bool,

    /// Streaming: abort the connection after K SSE chunks, without the
    /// terminating chunk.
    #[arg(long, value_name = "K")]
    pub reset_after_chunks: Option<u64>,

    /// Add `Retry-After: SECS` to injected failure responses.
    #[arg(long, value_name = "SECS")]
    pub retry_after: Option<u64>,

    /// Microseconds to prefill one prompt token that is not in the prefix
    /// cache, added to the time to first token (so cache hits show in TTFT).
    #[arg(long, value_name = "US", default_value_t = 50)]
    pub prefill_us_per_token: u64,

    /// Sequences in the running batch at once (vLLM's `--max-num-seqs`);
    /// later requests wait in the engine's queue in arrival order and are
    /// reported in `vllm:num_requests_waiting` (0: unlimited). See
    /// `scheduler.rs`.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_num_seqs: usize,

    /// Requests prefilled at once; the rest wait in arrival order (0:
    /// unlimited). See `scheduler.rs`.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub prefill_slots: usize,

    /// Each token's delay grows by this many percent per other sequence in
    /// the decode batch (0: decode never slows).
    #[arg(long, value_name = "PCT", default_value_t = 0)]
    pub decode_slowdown_pct: u32,

    /// A Hugging Face model directory (`tokenizer.json`,
    /// `tokenizer_config.json`, its chat template) to tokenize with, as a
    /// real engine serving that model would; its KV events then carry the
    /// model's token ids. Default: the simulated tokenizer.
    #[arg(long, value_name = "DIR")]
    pub tokenizer: Option<std::path::PathBuf>,

    /// Tokens per KV-cache block (vLLM's `--block-size`): the unit of prefix
    /// caching and of KV events. A partial last block is not cached.
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_BLOCK_SIZE,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=4096)
    )]
    pub block_size: usize,

    /// Capacity of the simulated prefix cache, in blocks; least recently
    /// used blocks are evicted past it.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 4096,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=(1 << 24))
    )]
    pub kv_blocks: usize,

    /// Publish vLLM KV-cache events on a ZeroMQ PUB socket bound here,
    /// `tcp://HOST:PORT` (`*` for every interface; port 0 picks a free port,
    /// reported on the first line of stdout).
    #[arg(long, value_name = "ENDPOINT")]
    pub kv_events: Option<String>,

    /// Serve replay of the last batches on a ZeroMQ ROUTER socket bound here
    /// (needs `--kv-events`).
    #[arg(long, value_name = "ENDPOINT", requires = "kv_events")]
    pub kv_replay: Option<String>,

    /// Replay answers in the older vLLM framing `["", seq, payload]` instead
    /// of `["", topic, seq, payload]`.
    #[arg(long, requires = "kv_replay")]
    pub kv_replay_legacy: bool,

    /// Batches the replay socket keeps.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 10_000,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=1_000_000)
    )]
    pub kv_replay_buffer: usize,

    /// The topic frame of every KV-event message (vLLM's default is empty).
    #[arg(long, value_name = "TOPIC", default_value = "")]
    pub kv_topic: String,

    /// How a batch and its events are encoded: msgpack arrays (older vLLM)
    /// or maps.
    #[arg(long, value_name = "FORM", value_enum, default_value_t = KvEncoding::Array)]
    pub kv_encoding: KvEncoding,

    /// How block hashes are sent: unsigned 64-bit integers, negative signed
    /// 64-bit integers, or 32-byte strings (real builds differ).
    #[arg(long, value_name = "FORM", value_enum, default_value_t = KvHashEncoding::U64)]
    pub kv_hash_encoding: KvHashEncoding,

    /// The `data_parallel_rank` every batch carries.
    #[arg(long, value_name = "R", default_value_t = 0)]
    pub data_parallel_rank: u32,

    /// Plays one side of a prefill/decode split (see `disagg`): a prefill
    /// engine answers only requests that hand their KV cache over, a decode
    /// engine only requests whose KV cache it can fetch. Default: neither.
    #[arg(long, value_name = "ROLE", value_enum)]
    pub pd_role: Option<PdRole>,

    /// The handshake of `--pd-role`: vLLM's `kv_transfer_params` or SGLang's
    /// bootstrap room.
    #[arg(long, value_name = "PROTOCOL", value_enum, default_value_t = PdProtocol::Vllm)]
    pub pd_protocol: PdProtocol,

    /// Worker threads of the runtime `run` builds.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 2,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..=256)
    )]
    pub threads: usize,
}

impl Default for FakeLlmArgs {
    fn default() -> Self {
        FakeLlmArgs {
            listen: "127.0.0.1:8000".to_owned(),
            name: "fake-llm".to_owned(),
            model: Vec::new(),
            ttft_ms: 0,
            queue_ttft_ms: 0,
            token_delay_ms: 0,
            max_tokens: 16,
            max_model_len: DEFAULT_MAX_MODEL_LEN,
            fail_status: None,
            fail_delay_ms: 0,
            hang: false,
            reset_after_chunks: None,
            retry_after: None,
            prefill_us_per_token: 50,
            tokenizer: None,
            max_num_seqs: 0,
            prefill_slots: 0,
            decode_slowdown_pct: 0,
            block_size: DEFAULT_BLOCK_SIZE,
            kv_blocks: 4096,
            kv_events: None,
            kv_replay: None,
            kv_replay_legacy: false,
            kv_replay_buffer: 10_000,
            kv_topic: String::new(),
            kv_encoding: KvEncoding::Array,
            kv_hash_encoding: KvHashEncoding::U64,
            data_parallel_rank: 0,
            pd_role: None,
            pd_protocol: PdProtocol::Vllm,
            threads: 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: FakeLlmArgs,
    }

    #[test]
    fn default_matches_empty_command_line() {
        let parsed = Cli::try_parse_from(["fake-llm"]).map(|cli| cli.args);
        assert_eq!(parsed.ok(), Some(FakeLlmArgs::default()));
    }

    #[test]
    fn model_flag_repeats() {
        let parsed = Cli::try_parse_from(["fake-llm", "--model", "a", "--model", "b", "--hang"])
            .map(|cli| cli.args);
        let args = parsed.ok();
        assert_eq!(
            args.as_ref().map(|a| a.model.clone()),
            Some(vec!["a".into(), "b".into()])
        );
        assert_eq!(args.map(|a| a.hang), Some(true));
    }

    #[test]
    fn out_of_range_values_are_rejected() {
        assert!(Cli::try_parse_from(["fake-llm", "--fail-status", "99"]).is_err());
        assert!(Cli::try_parse_from(["fake-llm", "--max-tokens", "0"]).is_err());
        assert!(Cli::try_parse_from(["fake-llm", "--threads", "0"]).is_err());
        assert!(Cli::try_parse_from(["fake-llm", "--block-size", "0"]).is_err());
        assert!(Cli::try_parse_from(["fake-llm", "--kv-encoding", "json"]).is_err());
    }

    #[test]
    fn kv_flags_parse_and_replay_needs_events() {
        let parsed = Cli::try_parse_from([
            "fake-llm",
            "--kv-events",
            "tcp://127.0.0.1:0",
            "--kv-replay",
            "tcp://127.0.0.1:0",
            "--kv-replay-legacy",
            "--kv-encoding",
            "map",
            "--kv-hash-encoding",
            "i64",
            "--data-parallel-rank",
            "2",
        ])
        .map(|cli| cli.args)
        .ok();
        assert_eq!(
            parsed.map(|a| (
                a.kv_encoding,
                a.kv_hash_encoding,
                a.data_parallel_rank,
                a.kv_replay_legacy
            )),
            Some((KvEncoding::Map, KvHashEncoding::I64, 2, true))
        );
        assert!(Cli::try_parse_from(["fake-llm", "--kv-replay", "tcp://127.0.0.1:0"]).is_err());
    }
}
