//! A failed HTTP request, answered as `{"error": message}` with its status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::gateway::auth::Denied;

/// A failed request: its status and what went wrong, answered as `{"error": message}`.
#[derive(Debug)]
pub(crate) enum ApiError {
    Failed {
        status: StatusCode,
        message: String,
    },
    /// Refused by the auth checks (answered and counted as such).
    Denied(Denied),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Failed { status, message } => {
                (status, Json(json!({ "error": message }))).into_response()
            }
            ApiError::Denied(denied) => denied.into_response(),
        }
    }
}

impl From<Denied> for ApiError {
    fn from(denied: Denied) -> Self {
        ApiError::Denied(denied)
    }
}

pub(crate) fn api_error(status: StatusCode, message: impl Into<String>) -> ApiError {
    ApiError::Failed {
        status,
        message: message.into(),
    }
}

/// A JSON error response: `{"error": message}`.
pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    api_error(status, message).into_response()
}
