//! What the control API answers, and the one place that maps its failures
//! to a status and the error JSON `{"error": {"message", "type", "code"}}`
//! (OpenAI's shape, as the proxy answers).

use http::StatusCode;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::config::{ConfigError, ConfigErrors};
use crate::control::store::StoreError;

/// Every refusal of the admin listener: `{"error": {...}}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// What went wrong, for a person.
    pub message: String,
    /// The family: `authentication_error`, `permission_error`,
    /// `invalid_request_error`, `not_found_error`, `conflict_error`,
    /// `server_error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// A fixed name for programs: `invalid_admin_token`, `not_found`, ...
    pub code: String,
    /// Field-level problems of a refused configuration (422).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<Problem>,
}

/// A configuration problem, at its field path.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Problem {
    /// `providers[0].base_url`; `null` for a problem of the whole document.
    pub field: Option<String>,
    pub message: String,
}

/// A collection's rows: `{"data": [...], "file_managed": [...]}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Listing<T> {
    pub data: Vec<T>,
    /// Keys of the rows rolter.toml defines: read-only here.
    pub file_managed: Vec<String>,
}

/// One row: `{"data": ...}`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RowAnswer<T> {
    pub data: T,
}

/// A write that was applied.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Written<T> {
    /// The row as stored (as deleted, for a delete).
    pub data: T,
    /// The configuration version the write produced.
    pub version: u64,
    /// Warnings of the configuration it produced (it was applied).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Problem>,
    /// A created API key's secret, shown this once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// A created admin token's secret, shown this once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl ErrorBody {
    /// The refusal for `status` where nothing more specific applies: its
    /// family and code follow the status.
    pub fn for_status(status: StatusCode, message: &str) -> ErrorBody {
        let (kind, code) = match status.as_u16() {
            401 => ("authentication_error", "invalid_admin_token"),
            403 => ("permission_error", "insufficient_role"),
            404 => ("not_found_error", "not_found"),
            405 => ("invalid_request_error", "method_not_allowed"),
            409 => ("conflict_error", "conflict"),
            400..=499 => ("invalid_request_error", "invalid_request"),
            503 => ("server_error", "unavailable"),
            _ => ("server_error", "server_error"),
        };
        ErrorBody {
            error: ErrorDetail {
                message: message.to_owned(),
                kind: kind.to_owned(),
                code: code.to_owned(),
                errors: Vec::new(),
            },
        }
    }
}

/// `value` as a JSON value (every answer type serializes).
pub fn to_json(value: &impl Serialize) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

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
        ApiResponse::refusal(status, kind, code, message, Vec::new())
    }

    fn refusal(
        status: StatusCode,
        kind: &str,
        code: &str,
        message: &str,
        errors: Vec<Problem>,
    ) -> ApiResponse {
        let body = ErrorBody {
            error: ErrorDetail {
                message: message.to_owned(),
                kind: kind.to_owned(),
                code: code.to_owned(),
                errors,
            },
        };
        ApiResponse::json(status, to_json(&body))
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
    ApiResponse::refusal(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_request_error",
        "invalid_configuration",
        &format!("the configuration would not validate: {message}"),
        errors.iter().map(problem).collect(),
    )
}

/// 422 for a change refused before validation (an all-zero blend, a row
/// without its key).
pub(super) fn unprocessable(field: &str, message: &str) -> ApiResponse {
    ApiResponse::refusal(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_request_error",
        "invalid_configuration",
        &format!("{field}: {message}"),
        vec![Problem {
            field: Some(field.to_owned()),
            message: message.to_owned(),
        }],
    )
}

/// A configuration problem as `{"field", "message"}`.
pub(crate) fn problem(error: &ConfigError) -> Problem {
    Problem {
        field: error.field.clone(),
        message: error.message.clone(),
    }
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
