//! A model's chat template and tokenizer, from its local Hugging Face
//! directory: request text to the token ids the engine will see.
//!
//! Precise prefix routing compares a request's token blocks with the
//! blocks the engines report in their KV events, so the gateway must turn
//! an OpenAI request into exactly the ids the engine computes. For vLLM
//! that is, for `/v1/chat/completions`: rebuild the messages as its chat
//! layer does ([`messages`](crate::ChatRequest)), render them through the
//! model's Jinja chat template with the generation prompt and the
//! tokenizer's special tokens as variables ([`template`]), and tokenize the
//! text without adding special tokens (the template wrote them); for
//! `/v1/completions`, tokenize the prompt with them. The fixture in
//! `tests/fidelity.rs` holds this against Python `transformers`.
//!
//! Cost is bounded: only the text's first `budget` bytes are tokenized
//! (routing reads the beginning of a conversation), content past it is not
//! even rendered, and the ids of prefixes seen before are reused
//! ([`prefix_cache`]).

mod messages;
mod model;
pub mod prefix_cache;
mod pyjson;
mod registry;
pub mod template;

use std::path::PathBuf;
use std::sync::Arc;

pub use messages::ChatRequest;
pub use model::ModelTokenizer;
pub use registry::TokenizerRegistry;
pub use template::{CompileError, RenderError};

/// A request's token ids, or its first part's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenIds {
    /// Shared with the prefix cache: not copied again.
    pub ids: Arc<[u32]>,
    /// Only the text's first budget bytes were tokenized.
    pub truncated: bool,
}

/// Why a model directory does not load. Each names its file.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LoadError {
    #[error("{}: not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("{}: cannot read: {reason}", file.display())]
    Read { file: PathBuf, reason: String },
    #[error("{}: not a tokenizer: {reason}", file.display())]
    Tokenizer { file: PathBuf, reason: String },
    #[error("{}{}: {reason}", file.display(), field.as_deref().map(|f| format!(", field `{f}`")).unwrap_or_default())]
    Config {
        file: PathBuf,
        field: Option<String>,
        reason: String,
    },
    #[error(transparent)]
    Template(CompileError),
}

/// Why a request has no token ids from the gateway. The request is still
/// routed, without them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenizeError {
    #[error("the model directory has no chat template")]
    NoTemplate,
    #[error(transparent)]
    Template(#[from] RenderError),
    #[error("the request does not match the chat shape: {0}")]
    Request(String),
    #[error("content the gateway does not tokenize: {0}")]
    Unsupported(String),
    #[error("the tokenizer failed: {0}")]
    Tokenizer(String),
}

impl TokenizeError {
    /// A fixed label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            TokenizeError::NoTemplate => "no_template",
            TokenizeError::Template(_) => "template_error",
            TokenizeError::Request(_) => "unreadable",
            TokenizeError::Unsupported(_) => "unsupported_content",
            TokenizeError::Tokenizer(_) => "tokenizer_error",
        }
    }
}
