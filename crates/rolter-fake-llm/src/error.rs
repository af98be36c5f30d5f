//! The one place that turns the fake engine's errors into HTTP answers, in
//! the shape vLLM uses: `{"error": {"message", "type", "param", "code"}}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered in OpenAI's JSON shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    /// The request field at fault, if one is.
    pub(crate) param: Option<&'static str>,
    /// Seconds for a `Retry-After` header (injected failures only).
    pub(crate) retry_after: Option<u64>,
}

impl ApiError {
    /// A 400, naming the field at fault.
    pub(crate) fn bad_request(param: Option<&'static str>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param,
            retry_after: None,
        }
    }

    /// vLLM's answer for a model it does not serve.
    pub(crate) fn unknown_model(model: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{model}` does not exist."),
            param: Some("model"),
            retry_after: None,
        }
    }

    /// vLLM's answer for a response id it does not hold.
    pub(crate) fn unknown_response(id: &str, param: Option<&'static str>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("Response with id '{id}' not found."),
            param,
            retry_after: None,
        }
    }

    /// The failure the operator asked for with `--fail-status` or `/fake/control`.
    pub(crate) fn injected(status: u16, engine: &str, retry_after: Option<u64>) -> Self {
        ApiError {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            message: format!("{engine}: injected failure (status {status})"),
            param: None,
            retry_after,
        }
    }
}

/// The `type` vLLM and the OpenAI SDKs give an error of this status.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "BadRequestError",
        401 => "AuthenticationError",
        403 => "PermissionDeniedError",
        404 => "NotFoundError",
        409 => "ConflictError",
        422 => "UnprocessableEntityError",
        429 => "RateLimitError",
        501 => "NotImplementedError",
        503 => "ServiceUnavailableError",
        code if code >= 500 => "InternalServerError",
        _ => "BadRequestError",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({
            "error": {
                "message": self.message,
                "type": error_type(self.status),
                "param": self.param,
                "code": self.status.as_u16(),
            }
        });
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// FastAPI's answer for a path or method vLLM does not route.
pub(crate) fn not_routed(status: StatusCode) -> Response {
    let detail = status.canonical_reason().unwrap_or("Not Found");
    (status, axum::Json(json!({ "detail": detail }))).into_response()
}
