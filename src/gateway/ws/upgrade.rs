//! The WebSocket route: checks the path, the caller and the limits, then upgrades and hands the
//! socket to a `Connection`.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;

use crate::gateway::auth;
use crate::gateway::ids::PathId;
use crate::gateway::server::io_watch::{IoWatch, MessageDeadline};
use crate::gateway::state::Gateway;
use crate::gateway::ws::connection;
use crate::gateway::ws::live_settings::ConnectOptions;
use crate::gateway::ws::writer::{SOCKET_READ_BUFFER, SOCKET_WRITE_BUFFER};

/// A JSON error response.
fn bad_request(message: impl std::fmt::Display) -> Response {
    let message = message.to_string();
    (
        StatusCode::BAD_REQUEST,
        Json(serde_json::json!({"error": message})),
    )
        .into_response()
}

pub(crate) async fn ws_upgrade(
    State(gateway): State<Arc<Gateway>>,
    axum::Extension(principal): axum::Extension<auth::Principal>,
    watch: Option<axum::Extension<Arc<IoWatch>>>,
    Path((user_id, session_id)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    headers: axum::http::HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    let ids =
        PathId::parse("user id", &user_id).and_then(|u| Ok((u, PathId::new_session(&session_id)?)));
    let (user_id, session_id) = match ids {
        Ok(ids) => ids,
        Err(message) => return bad_request(message),
    };
    if let Err(denied) = principal.check_session(user_id.as_str(), session_id.as_str()) {
        return denied.into_response();
    }
    let mut options = match ConnectOptions::from_query(
        &query,
        gateway.audio_frames,
        gateway.modality,
        &gateway.live.client,
    ) {
        Ok(options) => options,
        Err(message) => return bad_request(message),
    };
    options.caller_claims = principal.claims();
    // The header wins over the query parameter (browsers cannot set headers on a WebSocket).
    if let Some(parent) = crate::trace_context::traceparent_header(&headers) {
        options.trace_parent = Some(parent);
    }
    if gateway.shutdown.is_fired() {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    let slot = match gateway.limits.admit(user_id.as_str(), session_id.as_str()) {
        Ok(slot) => slot,
        Err(refused) => return refused.response(),
    };
    // A live run creates its session when it has none: that is one more of the user's.
    if let Err(refused) = gateway
        .quotas
        .admit_session(
            &gateway.runner,
            &gateway.limits.counters,
            &principal,
            &user_id,
            &session_id,
        )
        .await
    {
        return refused.into_response();
    }
    let watch = watch.map(|axum::Extension(watch)| watch);
    if let Some(watch) = &watch {
        watch.upgraded();
    }
    let message_deadline = gateway.message_read_timeout;
    let tracker = gateway.connections.clone();
    upgrade
        // Echoed when offered; a token offered beside it (`livegate.bearer.…`) never is.
        .protocols([auth::SUBPROTOCOL])
        .max_message_size(gateway.max_message_bytes)
        .max_frame_size(gateway.max_message_bytes)
        // tungstenite's default 128 KiB read buffer is zeroed as it is refilled and held per
        // connection; client messages are 640-byte audio frames and small JSON.
        .read_buffer_size(SOCKET_READ_BUFFER)
        .write_buffer_size(SOCKET_WRITE_BUFFER)
        .on_upgrade(move |socket| {
            let (sink, stream) = socket.split();
            let stream = MessageDeadline::new(stream, watch, message_deadline);
            tracker.track_future(async move {
                // Counted under the caps for as long as the connection lives.
                let _slot = slot;
                connection::serve_connection(gateway, sink, stream, user_id, session_id, options)
                    .await
            })
        })
}
