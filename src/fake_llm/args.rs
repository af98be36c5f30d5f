//! Command-line options of `rolter fake-llm`.

use clap::builder::{RangedI64ValueParser, RangedU64ValueParser};

/// The longest output (in tokens) the fake engine agrees to generate, like
/// vLLM's `max_model_len`: a larger `max_tokens` is a 400, not an allocation
/// the process cannot survive.
pub const MAX_OUTPUT_TOKENS: u32 = 131_072;

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
            token_delay_ms: 0,
            max_tokens: 16,
            fail_status: None,
            fail_delay_ms: 0,
            hang: false,
            reset_after_chunks: None,
            retry_after: None,
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
    }
}
