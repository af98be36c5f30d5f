//! The OpenAI API as rolter reads it: endpoints, request bodies, routing text.

mod conversation;
mod request;
mod token_ids;

pub use conversation::Conversation;
pub use request::{parse_request, ParsedRequest, RequestError, TextSpans};
pub use token_ids::{parse_token_ids, TOKEN_IDS_HEADER};

/// The endpoints the gateway serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    ChatCompletions,
    Completions,
    Embeddings,
    Models,
}

impl Endpoint {
    /// The endpoint at `path` (query string already removed), if rolter serves it.
    pub fn from_path(path: &str) -> Option<Endpoint> {
        match path {
            "/v1/chat/completions" => Some(Endpoint::ChatCompletions),
            "/v1/completions" => Some(Endpoint::Completions),
            "/v1/embeddings" => Some(Endpoint::Embeddings),
            "/v1/models" => Some(Endpoint::Models),
            _ => None,
        }
    }

    /// The one method the endpoint accepts.
    pub fn method(self) -> http::Method {
        match self {
            Endpoint::Models => http::Method::GET,
            _ => http::Method::POST,
        }
    }

    pub fn method_name(self) -> &'static str {
        match self {
            Endpoint::Models => "GET",
            _ => "POST",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "chat/completions",
            Endpoint::Completions => "completions",
            Endpoint::Embeddings => "embeddings",
            Endpoint::Models => "models",
        }
    }
}
