//! What the control API answers, and the one place that maps its failures
//! to a status and the error JSON `{"error": {"message", "type", "code"}}`
//! (OpenAI's shape, as the proxy answers).

use http::StatusCode;
use serde_json::{json, Value};

use crate::config::{ConfigError, ConfigErrors};
use crate::control::store::StoreError;

/// A status and a JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiResponse {
    pub status: StatusCode,
    pub body: Value,
}

impl ApiResponse {
    pub fn json(status: StatusCode, body: Value) -> ApiResponse {
        ApiResponse { status, body }
    }

    /// `{"error": {"message", "type", "code"}}`.
    pub fn error(status: StatusCode, kind: &str, code: &str, message: &str) -> ApiResponse {
        ApiResponse::json(
            status,
            json!({ "error": { "message": message, "type": kind, "code": code } }),
        )
    }

    /// 401: no admin token, or not one of ours. For the admin app, which
    /// authenticates before calling [`handle`](super::handle).
    pub fn unauthorized(message: &str) -> ApiResponse {
        ApiResponse::error(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid_admin_token",
            message,
        )
    }

    /// The body as bytes, for the HTTP response.
    pub fn body_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(&self.body).unwrap_or_default()
    }
}

pub(super) fn forbidden(message: &str) -> ApiResponse {
    ApiResponse::error(
        StatusCode::FORBIDDEN,
        "permission_error",
        "insufficient_role",
        message,
    )
}

pub(super) fn not_found(message: &str) -> ApiResponse {
    ApiResponse::error(
        StatusCode::NOT_FOUND,
        "not_found_error",
        "not_found",
        message,
    )
}

pub(super) fn method_not_allowed(method: &http::Method, path: &str) -> ApiResponse {
    ApiResponse::error(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        "method_not_allowed",
        &format!("{method} is not allowed on {path}"),
    )
}

pub(super) fn bad_request(message: &str) -> ApiResponse {
    ApiResponse::error(
        StatusCode::BAD_REQUEST,
        "invalid_request_error",
        "invalid_request",
        message,
    )
}

/// 409 for a row rolter.toml defines.
pub(super) fn file_managed(noun: &str, key: &str) -> ApiResponse {
    ApiResponse::error(
        StatusCode::CONFLICT,
        "conflict_error",
        "file_managed",
        &format!(
            "the {noun} `{key}` is managed in rolter.toml and is read-only here; change it in the file and reload"
        ),
    )
}

/// 422: the document the change would produce does not validate. Each
/// problem keeps its field path; the message lists them all.
pub(super) fn invalid_configuration(errors: &ConfigErrors) -> ApiResponse {
    let message = errors
        .iter()
        .map(field_message)
        .collect::<Vec<_>>()
        .join("; ");
    ApiResponse::json(
        StatusCode::UNPROCESSABLE_ENTITY,
        json!({
            "error": {
                "message": format!("the configuration would not validate: {message}"),
                "type": "invalid_request_error",
                "code": "invalid_configuration",
                "errors": errors.iter().map(problem).collect::<Vec<_>>(),
            }
        }),
    )
}

/// 422 for a change refused before validation (an all-zero blend, a row
/// without its key).
pub(super) fn unprocessable(field: &str, message: &str) -> ApiResponse {
    ApiResponse::json(
        StatusCode::UNPROCESSABLE_ENTITY,
        json!({
            "error": {
                "message": format!("{field}: {message}"),
                "type": "invalid_request_error",
                "code": "invalid_configuration",
                "errors": [{ "field": field, "message": message }],
            }
        }),
    )
}

/// A configuration problem as `{"field", "message"}`.
pub(super) fn problem(error: &ConfigError) -> Value {
    json!({ "field": error.field, "message": error.message })
}

fn field_message(error: &ConfigError) -> String {
    match &error.field {
        Some(field) => format!("{field}: {}", error.message),
        None => error.message.clone(),
    }
}

/// A store failure: 404, 409, 422, or 503 when the database cannot be
/// reached and 500 otherwise (both logged: nobody else sees them).
pub(super) fn store_error(error: StoreError) -> ApiResponse {
    match &error {
        StoreError::NotFound { .. } => not_found(&error.to_string()),
        StoreError::Conflict { .. } => ApiResponse::error(
            StatusCode::CONFLICT,
            "conflict_error",
            "already_exists",
            &error.to_string(),
        ),
        StoreError::Invalid { .. } | StoreError::InvalidPolicy { .. } => ApiResponse::error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request_error",
            "invalid_row",
            &error.to_string(),
        ),
        StoreError::Database {
            source: sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed,
            ..
        } => {
            log::error!("control API: {error}");
            ApiResponse::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "database_unavailable",
                &format!("the database is unavailable: {error}"),
            )
        }
        StoreError::Database { .. } | StoreError::Corrupt { .. } | StoreError::Migrate(_) => {
            log::error!("control API: {error}");
            ApiResponse::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "database_error",
                &error.to_string(),
            )
        }
    }
}
