//! Errors the gateway answers itself, and the one place that maps them to an
//! HTTP status and OpenAI's error JSON: `{"error": {"message", "type", "param", "code"}}`.

use bytes::Bytes;
use serde::Serialize;

use crate::openai::{Api, RequestError};
use crate::rate_limit::{Limited, CONCURRENCY_RETRY_AFTER_SECS};

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("Unknown endpoint: {method} {path}. rolter serves /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses, /v1/messages, /v1/rerank, /v1/score, /tokenize, /detokenize, /v1/audio/transcriptions, /v1/audio/translations and /v1/models.")]
    UnknownEndpoint { method: String, path: String },
    #[error("Method {method} is not allowed on {path}; use {allowed}.")]
    MethodNotAllowed {
        method: String,
        path: String,
        allowed: &'static str,
    },
    #[error("Missing API key: send it as `Authorization: Bearer <key>`.")]
    MissingApiKey,
    #[error("Invalid API key.")]
    InvalidApiKey,
    #[error("The API key `{key}` may not use the model `{model}`.")]
    ModelNotAllowed { key: String, model: String },
    #[error("The API key `{key}` may not use any provider serving the model `{model}`.")]
    NoAllowedProvider { key: String, model: String },
    #[error("The request body is larger than the limit of {limit} bytes.")]
    BodyTooLarge { limit: usize },
    #[error("{0}")]
    BadRequest(#[from] RequestError),
    #[error("The model `{model}` does not exist.")]
    UnknownModel { model: String },
    #[error("The request header is {size} bytes, over the limit of {limit} bytes.")]
    HeaderTooLarge { size: usize, limit: usize },
    #[error("No response `{id}` is known to this gateway: it was not answered through it, or it was deleted, or forgotten (the gateway remembers the newest 100,000).")]
    UnknownResponse { id: String },
    #[error("No eligible target for the model `{model}`: {reason}.")]
    NoEligibleTarget { model: String, reason: String },
    #[error("Every attempt for the model `{model}` failed; last: {last}.")]
    UpstreamFailed { model: String, last: String },
    #[error("Reading the request body failed: {0}.")]
    BodyRead(String),
    #[error("The request body did not arrive in time (waited {after:?}).")]
    BodyTimeout { after: std::time::Duration },
    #[error("Unsupported Content-Type `{content_type}`: send the request body as {expected}.")]
    UnsupportedMediaType {
        content_type: String,
        expected: &'static str,
    },
    #[error("The model `{model}` is not served on the `{endpoint}` endpoint: its route's `endpoints` list leaves it out.")]
    EndpointClosed {
        model: String,
        endpoint: &'static str,
    },
    #[error("Rate limit reached for the API key `{key}` on requests per minute (RPM): limit {limit} {scope}. Please try again in {retry_after_secs}s.")]
    RateLimited {
        key: String,
        limit: u32,
        retry_after_secs: u64,
        scope: LimitScope,
    },
    #[error("Rate limit reached for the API key `{key}` on tokens per minute (TPM): limit {limit} {scope}. Please try again in {retry_after_secs}s.")]
    TokenRateLimited {
        key: String,
        limit: u64,
        retry_after_secs: u64,
        scope: LimitScope,
    },
    #[error("Too many requests in flight for the API key `{key}`: limit {limit} at once {scope}. Please try again when one has finished.")]
    ConcurrencyLimited {
        key: String,
        limit: u32,
        scope: LimitScope,
    },
    #[error("The engines serving the model `{model}` are saturated and {reason}. Please try again in {retry_after_secs}s.")]
    Overloaded {
        model: String,
        reason: String,
        retry_after_secs: u64,
    },
}

/// Where the limit that refused a request is counted, as its message says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitScope {
    /// This node's own counters.
    Node,
    /// The fleet's, in Redis (`[rate_limits]`).
    Fleet,
}

impl std::fmt::Display for LimitScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LimitScope::Node => "on this gateway node",
            LimitScope::Fleet => "across the gateway fleet",
        })
    }
}

/// OpenAI's error object.
/// Anthropic's error shape: `{"type":"error","error":{"type":…,"message":…}}`.
#[derive(Serialize)]
struct AnthropicErrorBody<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: AnthropicErrorObject<'a>,
}

#[derive(Serialize)]
struct AnthropicErrorObject<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    message: String,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorObject<'a>,
}

#[derive(Serialize)]
struct ErrorObject<'a> {
    message: String,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

impl GatewayError {
    pub fn status(&self) -> u16 {
        match self {
            GatewayError::UnknownEndpoint { .. }
            | GatewayError::UnknownModel { .. }
            | GatewayError::EndpointClosed { .. }
            | GatewayError::UnknownResponse { .. } => 404,
            GatewayError::MethodNotAllowed { .. } => 405,
            GatewayError::MissingApiKey | GatewayError::InvalidApiKey => 401,
            GatewayError::ModelNotAllowed { .. } | GatewayError::NoAllowedProvider { .. } => 403,
            GatewayError::BodyTooLarge { .. } => 413,
            GatewayError::BadRequest(_) | GatewayError::BodyRead(_) => 400,
            GatewayError::NoEligibleTarget { .. } => 503,
            GatewayError::HeaderTooLarge { .. } => 431,
            GatewayError::BodyTimeout { .. } => 408,
            GatewayError::UnsupportedMediaType { .. } => 415,
            GatewayError::UpstreamFailed { .. } => 502,
            GatewayError::RateLimited { .. }
            | GatewayError::TokenRateLimited { .. }
            | GatewayError::ConcurrencyLimited { .. }
            | GatewayError::Overloaded { .. } => 429,
        }
    }

    /// Seconds for a `Retry-After` header, for the errors that have one.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match self {
            GatewayError::RateLimited {
                retry_after_secs, ..
            }
            | GatewayError::TokenRateLimited {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            GatewayError::ConcurrencyLimited { .. } => Some(CONCURRENCY_RETRY_AFTER_SECS),
            GatewayError::Overloaded {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            _ => None,
        }
    }

    /// The error a refused request is answered with.
    pub fn limited(key: &str, limited: Limited, scope: LimitScope) -> GatewayError {
        match limited {
            Limited::Rpm {
                limit,
                retry_after_secs,
            } => GatewayError::RateLimited {
                key: key.to_string(),
                limit,
                retry_after_secs,
                scope,
            },
            Limited::Tpm {
                limit,
                retry_after_secs,
            } => GatewayError::TokenRateLimited {
                key: key.to_string(),
                limit,
                retry_after_secs,
                scope,
            },
            Limited::Concurrency { limit } => GatewayError::ConcurrencyLimited {
                key: key.to_string(),
                limit,
                scope,
            },
        }
    }

    /// OpenAI's `type`, `param` and `code` for this error.
    fn classify(&self) -> (&'static str, Option<&'static str>, Option<&'static str>) {
        match self {
            GatewayError::UnknownEndpoint { .. } => {
                ("invalid_request_error", None, Some("unknown_url"))
            }
            GatewayError::MethodNotAllowed { .. } => {
                ("invalid_request_error", None, Some("method_not_allowed"))
            }
            GatewayError::MissingApiKey | GatewayError::InvalidApiKey => {
                ("authentication_error", None, Some("invalid_api_key"))
            }
            GatewayError::ModelNotAllowed { .. } | GatewayError::NoAllowedProvider { .. } => {
                ("permission_error", Some("model"), Some("model_not_allowed"))
            }
            GatewayError::BodyTooLarge { .. } => {
                ("invalid_request_error", None, Some("request_too_large"))
            }
            GatewayError::BadRequest(e) => ("invalid_request_error", e.param(), None),
            GatewayError::BodyRead(_) => ("invalid_request_error", None, None),
            GatewayError::BodyTimeout { .. } => {
                ("invalid_request_error", None, Some("request_timeout"))
            }
            GatewayError::UnsupportedMediaType { .. } => (
                "invalid_request_error",
                None,
                Some("unsupported_media_type"),
            ),
            GatewayError::UnknownModel { .. } => (
                "invalid_request_error",
                Some("model"),
                Some("model_not_found"),
            ),
            GatewayError::EndpointClosed { .. } => (
                "invalid_request_error",
                Some("model"),
                Some("endpoint_not_served"),
            ),
            GatewayError::NoEligibleTarget { .. } => {
                ("server_error", None, Some("no_eligible_target"))
            }
            GatewayError::UnknownResponse { .. } => {
                ("invalid_request_error", None, Some("response_not_found"))
            }
            GatewayError::UpstreamFailed { .. } => ("server_error", None, Some("upstream_error")),
            GatewayError::HeaderTooLarge { .. } => (
                "invalid_request_error",
                None,
                Some("request_header_too_large"),
            ),
            // OpenAI's shape for a requests-per-minute limit: the type names
            // the exhausted resource ("requests", as opposed to "tokens").
            GatewayError::RateLimited { .. }
            | GatewayError::TokenRateLimited { .. }
            | GatewayError::ConcurrencyLimited { .. } => {
                ("requests", None, Some("rate_limit_exceeded"))
            }
            // Not the caller's limit: the fleet's. A client that retries
            // on 429 does the right thing; one that reads the type learns why.
            GatewayError::Overloaded { .. } => ("overloaded_error", None, Some("fleet_overloaded")),
        }
    }

    /// A fixed name for logs: OpenAI's `code`, else its `type`.
    pub fn code(&self) -> &'static str {
        let (kind, _, code) = self.classify();
        code.unwrap_or(kind)
    }

    /// Anthropic's `error.type` for this error, by its status as
    /// Anthropic's API assigns them.
    fn anthropic_type(&self) -> &'static str {
        match (self, self.status()) {
            (GatewayError::Overloaded { .. }, _) => "overloaded_error",
            (_, 401) => "authentication_error",
            (_, 403) => "permission_error",
            (_, 404) => "not_found_error",
            (_, 413) => "request_too_large",
            (_, 429) => "rate_limit_error",
            (_, 503) => "overloaded_error",
            (_, status) if status < 500 => "invalid_request_error",
            _ => "api_error",
        }
    }

    /// The JSON body sent to a client of `api`.
    pub fn body_for(&self, api: Api) -> Bytes {
        match api {
            Api::OpenAi => self.body(),
            Api::Anthropic => {
                let body = AnthropicErrorBody {
                    kind: "error",
                    error: AnthropicErrorObject {
                        kind: self.anthropic_type(),
                        message: self.to_string(),
                    },
                };
                Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
            }
        }
    }

    /// The JSON body sent to an OpenAI client.
    pub fn body(&self) -> Bytes {
        let (kind, param, code) = self.classify();
        let body = ErrorBody {
            error: ErrorObject {
                message: self.to_string(),
                kind,
                param,
                code,
            },
        };
        Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_anthropic_client_gets_anthropics_shape() {
        let cases = [
            (GatewayError::MissingApiKey, 401, "authentication_error"),
            (
                GatewayError::UnknownModel { model: "m".into() },
                404,
                "not_found_error",
            ),
            (
                GatewayError::BadRequest(RequestError::MissingModel),
                400,
                "invalid_request_error",
            ),
            (
                GatewayError::limited(
                    "k",
                    Limited::Rpm {
                        limit: 1,
                        retry_after_secs: 3,
                    },
                    LimitScope::Node,
                ),
                429,
                "rate_limit_error",
            ),
            (
                GatewayError::NoEligibleTarget {
                    model: "m".into(),
                    reason: "r".into(),
                },
                503,
                "overloaded_error",
            ),
        ];
        for (error, status, kind) in cases {
            assert_eq!(error.status(), status);
            let json: serde_json::Value =
                serde_json::from_slice(&error.body_for(Api::Anthropic)).unwrap();
            assert_eq!(json["type"], "error", "{json}");
            assert_eq!(json["error"]["type"], kind, "{json}");
            assert_eq!(json["error"]["message"], error.to_string());
            assert!(json.get("param").is_none() && json["error"].get("code").is_none());
        }
        let openai: serde_json::Value =
            serde_json::from_slice(&GatewayError::MissingApiKey.body_for(Api::OpenAi)).unwrap();
        assert_eq!(openai["error"]["type"], "authentication_error");
        assert!(openai.get("type").is_none());
    }

    #[test]
    fn body_has_openai_shape_with_param() {
        let error = GatewayError::BadRequest(RequestError::ModelNotString);
        assert_eq!(error.status(), 400);
        let json: serde_json::Value = serde_json::from_slice(&error.body()).unwrap();
        assert_eq!(json["error"]["message"], "`model` must be a string");
        assert_eq!(json["error"]["type"], "invalid_request_error");
        assert_eq!(json["error"]["param"], "model");
        assert!(json["error"]["code"].is_null());
    }

    #[test]
    fn rate_limits_answer_429_in_openai_shape_with_retry_after() {
        let error = GatewayError::limited(
            "team",
            Limited::Rpm {
                limit: 3,
                retry_after_secs: 42,
            },
            LimitScope::Node,
        );
        assert_eq!(error.status(), 429);
        assert_eq!(error.retry_after_secs(), Some(42));
        let json: serde_json::Value = serde_json::from_slice(&error.body()).unwrap();
        assert_eq!(json["error"]["type"], "requests");
        assert_eq!(json["error"]["code"], "rate_limit_exceeded");
        assert!(json["error"]["param"].is_null());
        let message = json["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("`team`") && message.contains("42s"),
            "{message}"
        );

        let error =
            GatewayError::limited("team", Limited::Concurrency { limit: 2 }, LimitScope::Fleet);
        assert_eq!(error.status(), 429);
        assert_eq!(error.retry_after_secs(), Some(1));
        let json: serde_json::Value = serde_json::from_slice(&error.body()).unwrap();
        assert_eq!(json["error"]["code"], "rate_limit_exceeded");
        assert!(json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limit 2 at once across the gateway fleet"));
        assert_eq!(GatewayError::InvalidApiKey.retry_after_secs(), None);
    }

    #[test]
    fn an_overloaded_fleet_is_a_429_that_says_so_not_a_503() {
        let error = GatewayError::Overloaded {
            model: "chat".into(),
            reason: "the wait ran out after 30 s".into(),
            retry_after_secs: 3,
        };
        assert_eq!(error.status(), 429);
        assert_eq!(error.retry_after_secs(), Some(3));
        let json: serde_json::Value = serde_json::from_slice(&error.body()).unwrap();
        assert_eq!(json["error"]["type"], "overloaded_error");
        assert_eq!(json["error"]["code"], "fleet_overloaded");
        let message = json["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("`chat`") && message.contains("saturated"),
            "{message}"
        );
    }

    #[test]
    fn statuses_follow_the_contract() {
        let model = || "m".to_string();
        assert_eq!(GatewayError::UnknownModel { model: model() }.status(), 404);
        assert_eq!(GatewayError::BodyTooLarge { limit: 1 }.status(), 413);
        let too_large = GatewayError::HeaderTooLarge {
            size: 65_600,
            limit: 32_768,
        };
        assert_eq!(too_large.status(), 431);
        assert_eq!(too_large.code(), "request_header_too_large");
        assert_eq!(GatewayError::InvalidApiKey.status(), 401);
        assert_eq!(
            GatewayError::ModelNotAllowed {
                key: "k".into(),
                model: model()
            }
            .status(),
            403
        );
        assert_eq!(
            GatewayError::NoEligibleTarget {
                model: model(),
                reason: "r".into()
            }
            .status(),
            503
        );
    }
}
