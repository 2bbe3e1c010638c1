//! The auth layer on the routes: the middleware that authenticates protected routes and guards
//! the host in anonymous mode, the `/metrics` access check, and the auth routes themselves
//! (`/api/config`, `/api/tokens`). Who may do what is decided in `gateway::auth`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::json;

use crate::gateway::auth::{
    host_of, metrics_allowed, origin, token, AuthFailure, AuthMode, Denied, Principal,
    TOKEN_SECRET_ENV,
};
use crate::gateway::state::Gateway;

/// Counts a refusal carried by `response`.
fn count(gateway: &Gateway, response: &Response) {
    if let Some(AuthFailure(reason)) = response.extensions().get::<AuthFailure>() {
        gateway.metrics.auth_failure(reason);
    }
}

/// Authenticates a request to a protected route, hands its [`Principal`] to the handler, and
/// counts every refusal (its own and the handler's).
pub(crate) async fn authorize(
    State(gateway): State<Arc<Gateway>>,
    mut request: Request,
    next: Next,
) -> Response {
    let decided = gateway
        .auth
        .authenticate(request.method(), request.uri(), request.headers());
    let response = match decided {
        Ok(principal) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(denied) => denied.into_response(),
    };
    count(&gateway, &response);
    response
}

/// With `--auth none` on loopback, answers only requests whose `Host` is a loopback name: a page
/// on another site that points its own name at 127.0.0.1 (DNS rebinding) is refused.
pub(crate) async fn guard_host(
    State(gateway): State<Arc<Gateway>>,
    request: Request,
    next: Next,
) -> Response {
    if gateway.auth.loopback_hosts_only {
        let host = host_of(request.headers(), request.uri()).unwrap_or_default();
        if !origin::is_loopback_host(host) {
            let response = Denied::new(
                StatusCode::FORBIDDEN,
                "host",
                "this gateway answers loopback host names only (it runs without auth)",
            )
            .into_response();
            count(&gateway, &response);
            return response;
        }
    }
    next.run(request).await
}

/// The refusal for a `/metrics` caller on the main listener that is not [`metrics_allowed`].
pub(crate) fn refuse_metrics(
    gateway: &Gateway,
    peer: Option<SocketAddr>,
    headers: &HeaderMap,
) -> Option<Response> {
    let operator = gateway.auth.is_operator(headers);
    if metrics_allowed(peer, headers, operator) {
        return None;
    }
    let response = Denied::new(
        StatusCode::FORBIDDEN,
        "metrics",
        "metrics are served to loopback callers and operator keys only",
    )
    .into_response();
    count(gateway, &response);
    Some(response)
}

/// `GET /api/config`: what the built-in page needs to know before it signs in.
pub(crate) async fn config(State(gateway): State<Arc<Gateway>>) -> Response {
    let auth = match gateway.auth.mode() {
        AuthMode::None => "none",
        AuthMode::Token => "token",
    };
    Json(json!({ "auth": auth })).into_response()
}

/// The body of `POST /api/tokens`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TokenRequest {
    #[serde(alias = "user_id")]
    user_id: String,
    #[serde(default, alias = "session_id")]
    session_id: Option<String>,
    #[serde(default, alias = "ttl_seconds")]
    ttl_seconds: Option<u64>,
}

/// `POST /api/tokens {"userId", "sessionId"?, "ttlSeconds"?}` (operator keys only):
/// `{"token", "expiresAt"}`.
pub(crate) async fn mint_token(
    State(gateway): State<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    body: Bytes,
) -> Response {
    if principal != Principal::Operator {
        return Denied::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "minting tokens needs an operator API key",
        )
        .into_response();
    }
    let error = |status: StatusCode, message: String| {
        (status, Json(json!({ "error": message }))).into_response()
    };
    let Some(minter) = &gateway.auth.minter else {
        return error(
            StatusCode::NOT_IMPLEMENTED,
            format!("minting tokens needs {TOKEN_SECRET_ENV}"),
        );
    };
    let request: TokenRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid body: {e}")),
    };
    let minted = minter.mint(
        &request.user_id,
        request.session_id.as_deref(),
        request.ttl_seconds.map(Duration::from_secs),
    );
    match minted {
        Ok(minted) => {
            tracing::info!(user_id = request.user_id, session_id = ?request.session_id, "client token minted");
            Json(json!({ "token": minted.token, "expiresAt": minted.expires_at })).into_response()
        }
        Err(e @ (token::MintError::Id(_) | token::MintError::Ttl)) => {
            error(StatusCode::BAD_REQUEST, e.to_string())
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
