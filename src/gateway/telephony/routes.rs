//! The telephony routes: the carriers' webhooks and their calls' media streams.

use std::sync::Arc;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use super::{call, carrier, webhook};
use crate::gateway::auth::{AuthMode, Grant};
use crate::gateway::Gateway;

/// Largest message on a call's stream (Twilio's `media` is a few hundred bytes).
const MAX_STREAM_MESSAGE: usize = 64 * 1024;

/// The telephony routes: the webhook (checked by its carrier's signature) and the stream
/// (checked by the token in its path, or anonymous where the gateway is).
pub fn routes() -> Router<Arc<Gateway>> {
    Router::new()
        .route("/telephony/{carrier}/voice", post(webhook::voice))
        .route("/telephony/{carrier}/stream", get(stream_anonymous))
        .route(
            "/telephony/{carrier}/stream/{token}",
            get(stream_with_token),
        )
}

async fn stream_anonymous(
    State(gateway): State<Arc<Gateway>>,
    Path(carrier): Path<String>,
    upgrade: WebSocketUpgrade,
) -> Response {
    if gateway.auth.mode() != AuthMode::None {
        gateway.metrics.auth_failure("stream_token");
        return (
            StatusCode::UNAUTHORIZED,
            "a call's stream needs the token its webhook put in the URL",
        )
            .into_response();
    }
    accept_stream(gateway, &carrier, upgrade, None)
}

async fn stream_with_token(
    State(gateway): State<Arc<Gateway>>,
    Path((carrier, token)): Path<(String, String)>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let grant = match gateway.auth.verify_token(&token) {
        Ok(grant) => grant,
        Err(error) => {
            gateway.metrics.auth_failure(error.reason());
            tracing::info!(%error, "call stream refused");
            return (StatusCode::UNAUTHORIZED, error.to_string()).into_response();
        }
    };
    accept_stream(gateway, &carrier, upgrade, Some(grant))
}

fn accept_stream(
    gateway: Arc<Gateway>,
    carrier_name: &str,
    upgrade: WebSocketUpgrade,
    grant: Option<Grant>,
) -> Response {
    let Some(carrier) = carrier(carrier_name) else {
        return (StatusCode::NOT_FOUND, "no such carrier").into_response();
    };
    if gateway.shutdown.is_fired() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response();
    }
    let tracker = gateway.connections.clone();
    upgrade
        .max_message_size(MAX_STREAM_MESSAGE)
        .max_frame_size(MAX_STREAM_MESSAGE)
        .read_buffer_size(crate::gateway::ws::writer::SOCKET_READ_BUFFER)
        .write_buffer_size(crate::gateway::ws::writer::SOCKET_WRITE_BUFFER)
        .on_upgrade(move |socket| {
            tracker.track_future(call::serve_call(gateway, carrier, socket, grant))
        })
}
