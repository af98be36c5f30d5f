//! Token ids for routing from the request's text: the route's model
//! directory (`tokenizer = "DIR"`), the caller's ids, or none, and why.
//!
//! `precise_cache_aware` and the KV-block scorer match a request's token
//! blocks against the blocks its engines reported, so they need the ids the
//! engine will compute. Callers rarely send them (`x-rolter-token-ids`, an
//! integer `prompt`); a route with a tokenizer computes them as vLLM does
//! (`rolter-tokenize`: the chat template rendered, then tokenized) from the
//! first `tokenizer_budget_kib` of the rendered text. Caller-supplied ids
//! always win. A request the template refuses is routed without ids (the
//! scorers are neutral, least load decides) and counted by reason in
//! `rolter_routing_tokens_total`: the gateway never fails a request over
//! its own tokenization. Long bodies are tokenized off the proxy's threads
//! ([`INLINE_BODY_BYTES`]).
//!
//! Model directories are loaded by one process-wide registry, first when
//! the configuration is validated (so `rolter check` and a reload refuse a
//! broken one) and shared by every snapshot that names them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rolter_tokenize::{ChatRequest, LoadError, ModelTokenizer, TokenizeError, TokenizerRegistry};

use crate::openai::{as_chat, text_spans, Endpoint, ParsedRequest};

/// Default for `tokenizer_budget_kib`.
pub const DEFAULT_BUDGET_KIB: u32 = 64;
/// Upper bound for `tokenizer_budget_kib`.
pub const MAX_BUDGET_KIB: u32 = 4096;

/// The process's model directories.
pub fn registry() -> &'static TokenizerRegistry {
    static REGISTRY: OnceLock<TokenizerRegistry> = OnceLock::new();
    REGISTRY.get_or_init(TokenizerRegistry::new)
}

/// A route's tokenizer, as its snapshot holds it.
#[derive(Debug, Clone)]
pub struct RouteTokens {
    pub dir: PathBuf,
    pub model: Arc<ModelTokenizer>,
    pub budget_bytes: usize,
}

impl RouteTokens {
    /// The loaded model directory `dir` of a validated `tokenizer`
    /// setting, tokenizing up to `budget_bytes` of each request.
    pub fn load(dir: &Path, budget_bytes: usize) -> Result<Self, LoadError> {
        Ok(RouteTokens {
            dir: dir.to_path_buf(),
            model: registry().load(dir)?,
            budget_bytes,
        })
    }
}

/// Where a request's routing token ids came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    /// The caller sent them.
    Caller,
    /// The gateway computed them; `over_budget`: from the text's first
    /// budget bytes only.
    Gateway { over_budget: bool },
    /// None; routed without.
    None(NoTokens),
}

/// Why a request was routed without token ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoTokens {
    /// Its route has no `tokenizer`.
    NoTokenizer,
    /// The endpoint carries no text to tokenize (embeddings), or the body
    /// does not have the endpoint's shape.
    Unreadable,
    /// The model directory has no chat template.
    NoTemplate,
    /// The template refused the conversation (`raise_exception`) or failed.
    TemplateError,
    /// Content the gateway does not render (images, audio).
    UnsupportedContent,
    /// The tokenizer itself failed.
    TokenizerError,
    /// Every tokenizer slot was taken by other long requests.
    Busy,
}

impl TokenSource {
    pub const ALL: [TokenSource; 10] = [
        TokenSource::Caller,
        TokenSource::Gateway { over_budget: false },
        TokenSource::Gateway { over_budget: true },
        TokenSource::None(NoTokens::NoTokenizer),
        TokenSource::None(NoTokens::Unreadable),
        TokenSource::None(NoTokens::NoTemplate),
        TokenSource::None(NoTokens::TemplateError),
        TokenSource::None(NoTokens::UnsupportedContent),
        TokenSource::None(NoTokens::TokenizerError),
        TokenSource::None(NoTokens::Busy),
    ];

    /// `(source, reason)` label values.
    pub fn labels(self) -> (&'static str, &'static str) {
        match self {
            TokenSource::Caller => ("caller", ""),
            TokenSource::Gateway { over_budget: false } => ("gateway", ""),
            TokenSource::Gateway { over_budget: true } => ("gateway", "over_budget"),
            TokenSource::None(why) => ("none", why.as_str()),
        }
    }

    /// Index into [`TokenSource::ALL`].
    pub fn index(self) -> usize {
        TokenSource::ALL
            .iter()
            .position(|s| *s == self)
            .unwrap_or_default()
    }
}

impl NoTokens {
    pub fn as_str(self) -> &'static str {
        match self {
            NoTokens::NoTokenizer => "no_tokenizer",
            NoTokens::Unreadable => "unreadable",
            NoTokens::NoTemplate => "no_template",
            NoTokens::TemplateError => "template_error",
            NoTokens::UnsupportedContent => "unsupported_content",
            NoTokens::TokenizerError => "tokenizer_error",
            NoTokens::Busy => "tokenizer_busy",
        }
    }

    fn of(error: &TokenizeError) -> NoTokens {
        match error {
            TokenizeError::NoTemplate => NoTokens::NoTemplate,
            TokenizeError::Template(_) => NoTokens::TemplateError,
            TokenizeError::Request(_) => NoTokens::Unreadable,
            TokenizeError::Unsupported(_) => NoTokens::UnsupportedContent,
            TokenizeError::Tokenizer(_) => NoTokens::TokenizerError,
        }
    }
}

/// Bodies up to this size are tokenized on the proxy's own thread; larger
/// ones on tokio's blocking pool, so a long conversation arriving cold
/// (milliseconds of tokenizer work) never stalls the other requests that
/// thread serves.
pub const INLINE_BODY_BYTES: usize = 8 * 1024;

/// Tokenizations running on the blocking pool at once; a request past this
/// is routed without ids (`tokenizer_busy`) rather than queued behind them.
fn offload_slots() -> &'static Arc<tokio::sync::Semaphore> {
    static SLOTS: OnceLock<Arc<tokio::sync::Semaphore>> = OnceLock::new();
    SLOTS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        Arc::new(tokio::sync::Semaphore::new((2 * cores).max(4)))
    })
}

/// Fills `request.token_ids` from the route's tokenizer when the caller
/// sent none, and says where they came from. `body` is the request body
/// `request` was parsed from.
pub async fn fill_token_ids(
    tokens: Option<&RouteTokens>,
    endpoint: Endpoint,
    body: &bytes::Bytes,
    request: &mut ParsedRequest,
) -> TokenSource {
    if request.token_ids.is_some() {
        return TokenSource::Caller;
    }
    let Some(tokens) = tokens else {
        return TokenSource::None(NoTokens::NoTokenizer);
    };
    if !request.readable {
        return TokenSource::None(NoTokens::Unreadable);
    }
    let result = if body.len() <= INLINE_BODY_BYTES {
        token_ids(tokens, endpoint, body)
    } else {
        let Ok(slot) = Arc::clone(offload_slots()).try_acquire_owned() else {
            return TokenSource::None(NoTokens::Busy);
        };
        let (tokens, body) = (tokens.clone(), body.clone());
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            token_ids(&tokens, endpoint, &body)
        })
        .await
        .unwrap_or(Err(NoTokens::TokenizerError))
    };
    match result {
        Ok((ids, over_budget)) => {
            request.token_ids = Some(ids);
            TokenSource::Gateway { over_budget }
        }
        Err(why) => TokenSource::None(why),
    }
}

/// The ids of the request in `body`, and whether only its budget was
/// tokenized. Its parts are located here, off the proxy thread for a long
/// body, by a parse of their own: the request path does not capture them.
fn token_ids(
    tokens: &RouteTokens,
    endpoint: Endpoint,
    body: &[u8],
) -> Result<(Arc<[u32]>, bool), NoTokens> {
    let spans = text_spans(endpoint, body).ok_or(NoTokens::Unreadable)?;
    let text = |range: &std::ops::Range<usize>| std::str::from_utf8(body.get(range.clone())?).ok();
    let result = match endpoint {
        Endpoint::ChatCompletions => {
            let messages = spans
                .messages
                .as_ref()
                .and_then(text)
                .ok_or(NoTokens::Unreadable)?;
            let chat = ChatRequest {
                messages,
                tools: spans.tools.as_ref().and_then(text),
                chat_template_kwargs: spans.chat_template_kwargs.as_ref().and_then(text),
                add_generation_prompt: spans.add_generation_prompt,
            };
            tokens.model.chat_token_ids(&chat, tokens.budget_bytes)
        }
        Endpoint::Completions => {
            let prompt = spans
                .prompt
                .as_ref()
                .and_then(|range| body.get(range.clone()))
                .and_then(|raw| serde_json::from_slice::<std::borrow::Cow<'_, str>>(raw).ok())
                .ok_or(NoTokens::Unreadable)?;
            tokens.model.prompt_token_ids(&prompt, tokens.budget_bytes)
        }
        Endpoint::Messages | Endpoint::MessagesCountTokens | Endpoint::Responses => {
            let (system, conversation) = match endpoint {
                Endpoint::Responses => (spans.system.as_ref(), spans.input.as_ref()),
                _ => (spans.system.as_ref(), spans.messages.as_ref()),
            };
            let conversation = conversation.and_then(text).ok_or(NoTokens::Unreadable)?;
            let system = system.and_then(text);
            let tools = spans.tools.as_ref().and_then(text);
            let parts = match endpoint {
                Endpoint::Responses => as_chat::from_responses(system, conversation, tools),
                _ => as_chat::from_messages(system, conversation, tools),
            }
            .ok_or(NoTokens::Unreadable)?;
            let chat = ChatRequest {
                messages: &parts.messages,
                tools: parts.tools.as_deref(),
                chat_template_kwargs: None,
                add_generation_prompt: None,
            };
            tokens.model.chat_token_ids(&chat, tokens.budget_bytes)
        }
        _ => return Err(NoTokens::Unreadable),
    };
    match result {
        Ok(ids) if !ids.ids.is_empty() => Ok((ids.ids, ids.truncated)),
        Ok(_) => Err(NoTokens::Unreadable),
        Err(error) => {
            log::debug!(
                "routing without token ids ({}): {error}",
                tokens.dir.display()
            );
            Err(NoTokens::of(&error))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::parse_request;

    fn demo() -> RouteTokens {
        RouteTokens::load(
            Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/conf/demo-tokenizer")),
            64 * 1024,
        )
        .unwrap()
    }

    fn chat(content: &str) -> bytes::Bytes {
        let body =
            serde_json::json!({"model": "m", "messages": [{"role": "user", "content": content}]});
        bytes::Bytes::from(body.to_string())
    }

    async fn source_of(
        tokens: Option<&RouteTokens>,
        body: &bytes::Bytes,
    ) -> (TokenSource, Option<Arc<[u32]>>) {
        let mut request = parse_request(Endpoint::ChatCompletions, body).unwrap();
        let source = fill_token_ids(tokens, Endpoint::ChatCompletions, body, &mut request).await;
        (source, request.token_ids)
    }

    #[tokio::test]
    async fn long_bodies_get_the_same_ids_off_the_proxy_thread() {
        let tokens = demo();
        let word = "conversation ";
        let short = chat(&word.repeat(10));
        let long = chat(&word.repeat(2 * INLINE_BODY_BYTES / word.len()));
        assert!(short.len() <= INLINE_BODY_BYTES && long.len() > INLINE_BODY_BYTES);
        let (source, short_ids) = source_of(Some(&tokens), &short).await;
        assert_eq!(source, TokenSource::Gateway { over_budget: false });
        let (source, long_ids) = source_of(Some(&tokens), &long).await;
        assert_eq!(source, TokenSource::Gateway { over_budget: false });
        let (short_ids, long_ids) = (short_ids.unwrap(), long_ids.unwrap());
        // Both start with the same template tokens and the same words.
        assert!(long_ids.len() > 10 * short_ids.len() / 2);
        assert_eq!(short_ids[..4], long_ids[..4]);
    }

    #[tokio::test]
    async fn caller_ids_win_and_a_route_without_tokenizer_says_so() {
        let tokens = demo();
        let body = chat("hello");
        let mut request = parse_request(Endpoint::ChatCompletions, &body).unwrap();
        request.token_ids = Some(Arc::from([1, 2, 3]));
        let source = fill_token_ids(
            Some(&tokens),
            Endpoint::ChatCompletions,
            &body,
            &mut request,
        )
        .await;
        assert_eq!(
            (source, request.token_ids),
            (TokenSource::Caller, Some(Arc::from([1, 2, 3])))
        );
        assert_eq!(
            source_of(None, &body).await,
            (TokenSource::None(NoTokens::NoTokenizer), None)
        );
        let image = bytes::Bytes::from(
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x/a.png"}}]}]}"#,
        );
        assert_eq!(
            source_of(Some(&tokens), &image).await.0,
            TokenSource::None(NoTokens::UnsupportedContent)
        );
        for source in TokenSource::ALL {
            assert_eq!(TokenSource::ALL[source.index()], source);
        }
    }
}
