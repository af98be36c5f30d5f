//! The client APIs rolter reads: OpenAI's (chat, completions, embeddings,
//! responses) and Anthropic's Messages, as vLLM and SGLang serve them:
//! endpoints, request bodies, routing text.

pub mod as_chat;
mod content;
mod conversation;
mod messages;
mod raw;
mod request;
mod responses;
mod token_ids;
pub mod usage;

pub use conversation::Conversation;
pub use request::{parse_request, ParsedRequest, RequestError, Splice, TextSpans};
pub use token_ids::{parse_token_ids, TOKEN_IDS_HEADER};

/// The endpoints the gateway serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    ChatCompletions,
    Completions,
    Embeddings,
    Models,
    /// OpenAI's Responses API, `POST /v1/responses`.
    Responses,
    /// Anthropic's Messages API, `POST /v1/messages`.
    Messages,
    /// `POST /v1/messages/count_tokens`: a Messages body, counted.
    MessagesCountTokens,
    /// `GET`/`DELETE /v1/responses/{id}`, `GET …/{id}/input_items`,
    /// `POST …/{id}/cancel`: a stored response, at the engine holding it.
    ResponseById,
}

/// Whose API a request speaks: the shape of the errors rolter answers it with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    OpenAi,
    Anthropic,
}

impl Api {
    /// The API of a request for `path` (query string already removed).
    pub fn of_path(path: &str) -> Api {
        match Endpoint::from_path(path) {
            Some(Endpoint::Messages | Endpoint::MessagesCountTokens) => Api::Anthropic,
            _ => Api::OpenAi,
        }
    }
}

impl Endpoint {
    /// The endpoint at `path` (query string already removed), if rolter serves it.
    pub fn from_path(path: &str) -> Option<Endpoint> {
        match path {
            "/v1/chat/completions" => Some(Endpoint::ChatCompletions),
            "/v1/completions" => Some(Endpoint::Completions),
            "/v1/embeddings" => Some(Endpoint::Embeddings),
            "/v1/models" => Some(Endpoint::Models),
            "/v1/responses" => Some(Endpoint::Responses),
            "/v1/messages" => Some(Endpoint::Messages),
            "/v1/messages/count_tokens" => Some(Endpoint::MessagesCountTokens),
            _ if response_id(path).is_some() => Some(Endpoint::ResponseById),
            _ => None,
        }
    }

    /// Whether the endpoint at `path` accepts `method`.
    pub fn allows(self, method: &http::Method, path: &str) -> bool {
        match self {
            Endpoint::Models => method == http::Method::GET,
            Endpoint::ResponseById => match path.rsplit_once('/').map(|(_, last)| last) {
                Some("cancel") => method == http::Method::POST,
                Some("input_items") => method == http::Method::GET,
                _ => method == http::Method::GET || method == http::Method::DELETE,
            },
            _ => method == http::Method::POST,
        }
    }

    /// The methods `allows` accepts at `path`, for a 405's `Allow`.
    pub fn method_name(self, path: &str) -> &'static str {
        match self {
            Endpoint::Models => "GET",
            Endpoint::ResponseById => match path.rsplit_once('/').map(|(_, last)| last) {
                Some("cancel") => "POST",
                Some("input_items") => "GET",
                _ => "GET, DELETE",
            },
            _ => "POST",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "chat/completions",
            Endpoint::Completions => "completions",
            Endpoint::Embeddings => "embeddings",
            Endpoint::Models => "models",
            Endpoint::Responses => "responses",
            Endpoint::Messages => "messages",
            Endpoint::MessagesCountTokens => "messages/count_tokens",
            Endpoint::ResponseById => "responses/{id}",
        }
    }
}

/// The response id in a `/v1/responses/{id}[/input_items|/cancel]` path.
pub fn response_id(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/v1/responses/")?;
    let id = match rest.split_once('/') {
        Some((id, "input_items" | "cancel")) => id,
        Some(_) => return None,
        None => rest,
    };
    (!id.is_empty()).then_some(id)
}
