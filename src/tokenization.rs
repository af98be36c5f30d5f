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
//! its own tokenization.
//!
//! Model directories are loaded by one process-wide registry, first when
//! the configuration is validated (so `rolter check` and a reload refuse a
//! broken one) and shared by every snapshot that names them.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use rolter_tokenize::{ChatRequest, LoadError, ModelTokenizer, TokenizeError, TokenizerRegistry};

use crate::config::RouteTokenizer;
use crate::openai::{Endpoint, ParsedRequest};

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
    /// The loaded directory of a validated `tokenizer` setting.
    pub fn load(config: &RouteTokenizer) -> Result<Self, LoadError> {
        Ok(RouteTokens {
            dir: config.dir.clone(),
            model: registry().load(&config.dir)?,
            budget_bytes: config.budget_bytes,
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
}

impl TokenSource {
    pub const ALL: [TokenSource; 9] = [
        TokenSource::Caller,
        TokenSource::Gateway { over_budget: false },
        TokenSource::Gateway { over_budget: true },
        TokenSource::None(NoTokens::NoTokenizer),
        TokenSource::None(NoTokens::Unreadable),
        TokenSource::None(NoTokens::NoTemplate),
        TokenSource::None(NoTokens::TemplateError),
        TokenSource::None(NoTokens::UnsupportedContent),
        TokenSource::None(NoTokens::TokenizerError),
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

/// Fills `request.token_ids` from the route's tokenizer when the caller
/// sent none, and says where they came from. `body` is the request body
/// `request` was parsed from.
pub fn fill_token_ids(
    tokens: Option<&RouteTokens>,
    endpoint: Endpoint,
    body: &[u8],
    request: &mut ParsedRequest,
) -> TokenSource {
    if request.token_ids.is_some() {
        return TokenSource::Caller;
    }
    let Some(tokens) = tokens else {
        return TokenSource::None(NoTokens::NoTokenizer);
    };
    let result = match (endpoint, &request.text_spans) {
        (Endpoint::ChatCompletions, Some(spans)) => {
            let text =
                |range: &std::ops::Range<usize>| std::str::from_utf8(&body[range.clone()]).ok();
            let Some(messages) = spans.messages.as_ref().and_then(text) else {
                return TokenSource::None(NoTokens::Unreadable);
            };
            let chat = ChatRequest {
                messages,
                tools: spans.tools.as_ref().and_then(text),
                chat_template_kwargs: spans.chat_template_kwargs.as_ref().and_then(text),
                add_generation_prompt: spans.add_generation_prompt,
            };
            tokens.model.chat_token_ids(&chat, tokens.budget_bytes)
        }
        (Endpoint::Completions, Some(spans)) => {
            let Some(prompt) = spans.prompt.as_ref().and_then(|range| {
                serde_json::from_slice::<std::borrow::Cow<'_, str>>(&body[range.clone()]).ok()
            }) else {
                return TokenSource::None(NoTokens::Unreadable);
            };
            tokens.model.prompt_token_ids(&prompt, tokens.budget_bytes)
        }
        _ => return TokenSource::None(NoTokens::Unreadable),
    };
    match result {
        Ok(ids) if !ids.ids.is_empty() => {
            let over_budget = ids.truncated;
            request.token_ids = Some(ids.ids);
            TokenSource::Gateway { over_budget }
        }
        Ok(_) => TokenSource::None(NoTokens::Unreadable),
        Err(error) => {
            log::debug!(
                "routing without token ids ({}): {error}",
                tokens.dir.display()
            );
            TokenSource::None(NoTokens::of(&error))
        }
    }
}
