//! The client APIs rolter reads: OpenAI's (chat, completions, embeddings,
//! responses, audio), Anthropic's Messages and the engines' own (rerank,
//! score, tokenize), as vLLM and SGLang serve them: endpoints, request
//! bodies, routing text.

pub mod as_chat;
mod content;
mod conversation;
mod envelope;
mod escaped;
mod form;
mod messages;
mod plain_run;
mod prescan;
mod raw;
mod request;
mod responses;
mod scan;
mod token_ids;
mod turns;
pub mod usage;

pub use conversation::{Conversation, Digest};
pub use form::form_boundary;
pub use prescan::{Prescan, Prescanned};
pub use request::{
    parse_form_request, parse_prescanned, parse_request, parse_request_by_serde, read_prescanned,
    read_request, text_spans, ModelLiteral, ParsedRequest, RequestEnvelope, RequestError, Splice,
    TextSpans,
};
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
    /// `POST /v1/rerank` (also vLLM's `/rerank` and Cohere-style `/v2/rerank`).
    Rerank,
    /// `POST /v1/score` (also `/score`).
    Score,
    /// vLLM's `POST /tokenize`.
    Tokenize,
    /// vLLM's `POST /detokenize`.
    Detokenize,
    /// `POST /v1/audio/transcriptions`: a `multipart/form-data` body.
    AudioTranscriptions,
    /// `POST /v1/audio/translations`: a `multipart/form-data` body.
    AudioTranslations,
}

/// Every endpoint a route's `endpoints` allow list may name, by
/// [`Endpoint::as_str`]. `/v1/models` is the gateway's own answer and
/// `/v1/responses/{id}` belongs to `responses`.
pub const ROUTABLE_ENDPOINTS: [Endpoint; 12] = [
    Endpoint::ChatCompletions,
    Endpoint::Completions,
    Endpoint::Embeddings,
    Endpoint::Responses,
    Endpoint::Messages,
    Endpoint::MessagesCountTokens,
    Endpoint::Rerank,
    Endpoint::Score,
    Endpoint::Tokenize,
    Endpoint::Detokenize,
    Endpoint::AudioTranscriptions,
    Endpoint::AudioTranslations,
];

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
            "/v1/rerank" | "/rerank" | "/v2/rerank" => Some(Endpoint::Rerank),
            "/v1/score" | "/score" => Some(Endpoint::Score),
            "/tokenize" => Some(Endpoint::Tokenize),
            "/detokenize" => Some(Endpoint::Detokenize),
            "/v1/audio/transcriptions" => Some(Endpoint::AudioTranscriptions),
            "/v1/audio/translations" => Some(Endpoint::AudioTranslations),
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
            Endpoint::Rerank => "rerank",
            Endpoint::Score => "score",
            Endpoint::Tokenize => "tokenize",
            Endpoint::Detokenize => "detokenize",
            Endpoint::AudioTranscriptions => "audio/transcriptions",
            Endpoint::AudioTranslations => "audio/translations",
        }
    }

    /// The endpoint named `name` in a route's `endpoints` allow list.
    pub fn routable(name: &str) -> Option<Endpoint> {
        ROUTABLE_ENDPOINTS.into_iter().find(|e| e.as_str() == name)
    }

    /// Whether the body is `multipart/form-data` rather than JSON.
    pub fn takes_form(self) -> bool {
        matches!(
            self,
            Endpoint::AudioTranscriptions | Endpoint::AudioTranslations
        )
    }

    /// Whether the engine's answer carries a token `usage` worth counting.
    pub fn reports_usage(self) -> bool {
        !matches!(
            self,
            Endpoint::MessagesCountTokens
                | Endpoint::Tokenize
                | Endpoint::Detokenize
                | Endpoint::AudioTranscriptions
                | Endpoint::AudioTranslations
                | Endpoint::Models
        )
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

/// The endpoints a route serves (its `endpoints` allow list), as a set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointSet(u16);

impl EndpointSet {
    /// Every routable endpoint: a route without `endpoints`.
    pub const ALL: EndpointSet = EndpointSet((1 << ROUTABLE_ENDPOINTS.len()) - 1);
    pub const NONE: EndpointSet = EndpointSet(0);

    fn bit(endpoint: Endpoint) -> u16 {
        ROUTABLE_ENDPOINTS
            .iter()
            .position(|e| *e == endpoint)
            .map_or(0, |i| 1 << i)
    }

    #[must_use]
    pub fn with(self, endpoint: Endpoint) -> EndpointSet {
        EndpointSet(self.0 | Self::bit(endpoint))
    }

    /// Whether a request for `endpoint` may use the route. `/v1/models` is
    /// not the route's to refuse; a stored response goes with `responses`.
    pub fn allows(self, endpoint: Endpoint) -> bool {
        match endpoint {
            Endpoint::Models => true,
            Endpoint::ResponseById => self.allows(Endpoint::Responses),
            other => self.0 & Self::bit(other) != 0,
        }
    }

    /// The names of the endpoints in the set, in [`ROUTABLE_ENDPOINTS`] order.
    pub fn names(self) -> Vec<String> {
        ROUTABLE_ENDPOINTS
            .into_iter()
            .filter(|e| self.allows(*e))
            .map(|e| e.as_str().to_string())
            .collect()
    }
}

impl Default for EndpointSet {
    fn default() -> Self {
        EndpointSet::ALL
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_routable_endpoint_has_its_own_name_and_path() {
        for (i, endpoint) in ROUTABLE_ENDPOINTS.into_iter().enumerate() {
            assert_eq!(Endpoint::routable(endpoint.as_str()), Some(endpoint));
            assert!(ROUTABLE_ENDPOINTS[..i]
                .iter()
                .all(|e| e.as_str() != endpoint.as_str()));
        }
        assert_eq!(Endpoint::routable("models"), None);
        assert_eq!(Endpoint::routable("responses/{id}"), None);
        for (path, endpoint) in [
            ("/v2/rerank", Endpoint::Rerank),
            ("/rerank", Endpoint::Rerank),
            ("/score", Endpoint::Score),
            ("/detokenize", Endpoint::Detokenize),
            ("/v1/audio/translations", Endpoint::AudioTranslations),
        ] {
            assert_eq!(Endpoint::from_path(path), Some(endpoint), "{path}");
        }
    }

    #[test]
    fn an_endpoint_set_opens_only_what_it_names() {
        let set = EndpointSet::NONE
            .with(Endpoint::ChatCompletions)
            .with(Endpoint::Responses);
        assert!(set.allows(Endpoint::ChatCompletions));
        assert!(set.allows(Endpoint::ResponseById));
        assert!(set.allows(Endpoint::Models));
        assert!(!set.allows(Endpoint::Completions));
        assert!(!set.allows(Endpoint::AudioTranscriptions));
        assert_eq!(set.names(), ["chat/completions", "responses"]);
        assert!(ROUTABLE_ENDPOINTS
            .iter()
            .all(|e| EndpointSet::ALL.allows(*e)));
        assert_eq!(EndpointSet::ALL.names().len(), ROUTABLE_ENDPOINTS.len());
    }
}
