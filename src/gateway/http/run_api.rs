//! ADK API-server routes for turn-based runs: `POST /run` (the events as a JSON array) and
//! `POST /run_sse` (the events as server-sent events), plus creating the session they run in.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tracing::Instrument;

use crate::event::Content;
use crate::gateway::auth::Principal;
use crate::gateway::ids::PathId;
use crate::gateway::server::limits::{LiveSlot, Refused};
use crate::gateway::state::Gateway;
use crate::live::RunConfig;
use crate::runner::{LiveRun, RunError};

/// ADK's `RunAgentRequest` (camelCase, snake_case accepted).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunAgentRequest {
    #[serde(alias = "app_name")]
    app_name: String,
    #[serde(alias = "user_id")]
    user_id: String,
    #[serde(alias = "session_id")]
    session_id: String,
    #[serde(alias = "new_message")]
    new_message: Content,
    #[serde(default)]
    streaming: bool,
    #[serde(default, alias = "state_delta")]
    state_delta: Option<Map<String, Value>>,
}

use crate::gateway::http::error::error;

fn run_error(e: RunError) -> Response {
    let status = match &e {
        RunError::SessionNotFound(_) => StatusCode::NOT_FOUND,
        RunError::InvalidRequest(_) => StatusCode::BAD_REQUEST,
        RunError::Session(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, e.to_string())
}

/// A turn-based run under way, and its place under the user's cap on live sessions, which it
/// holds until its events have all been taken.
struct Started {
    run: LiveRun,
    _slot: LiveSlot,
    /// The request's trace span, kept until the run's last event is taken.
    _span: tracing::Span,
}

/// Parses and starts a run; errors are finished responses.
async fn start(
    gateway: &Arc<Gateway>,
    principal: &Principal,
    headers: &axum::http::HeaderMap,
    body: &[u8],
) -> Result<Started, Response> {
    let mut request: RunAgentRequest = serde_json::from_slice(body)
        .map_err(|e| error(StatusCode::BAD_REQUEST, format!("invalid run request: {e}")))?;
    // The same limits as a turn on the socket: a turn is stored, replayed and paged alike.
    gateway
        .frame_limits
        .check_turn(&mut request.new_message)
        .map_err(|e| error(StatusCode::BAD_REQUEST, format!("invalid run request: {e}")))?;
    if request.app_name != gateway.runner.app_name {
        return Err(error(
            StatusCode::NOT_FOUND,
            format!("app {:?} not found", request.app_name),
        ));
    }
    let user_id = PathId::parse("user id", &request.user_id)
        .map_err(|m| error(StatusCode::BAD_REQUEST, m.to_string()))?;
    let session_id = PathId::parse("session id", &request.session_id)
        .map_err(|m| error(StatusCode::BAD_REQUEST, m.to_string()))?;
    let state_delta = request.state_delta.unwrap_or_default();
    principal
        .check_session(user_id.as_str(), session_id.as_str())
        .and_then(|()| principal.check_state(&state_delta))
        .map_err(IntoResponse::into_response)?;
    check_state_quota(gateway, principal, &user_id, &session_id, &state_delta).await?;
    // A turn is the user's live session while it runs, as a WebSocket is.
    let slot = gateway
        .limits
        .admit_run(user_id.as_str(), session_id.as_str())
        .map_err(Refused::response)?;
    let span = tracing::info_span!(
        target: crate::trace_context::TRACE_TARGET,
        "run",
        otel.name = "livegate.run",
        otel.kind = "server",
        user_id = %user_id,
        session_id = %session_id,
        trace_id = tracing::field::Empty,
        gen_ai.conversation.id = %session_id,
    );
    let parent = crate::trace_context::traceparent_header(headers);
    if let Some(trace_id) = crate::trace_context::continue_trace(&span, parent.as_ref()) {
        span.record("trace_id", tracing::field::display(&trace_id));
    }
    let run = gateway
        .runner
        .run_async(
            user_id.as_str(),
            session_id.as_str(),
            request.new_message,
            state_delta,
            RunConfig {
                caller_claims: principal.claims(),
                ..RunConfig::default()
            },
            request.streaming,
        )
        .instrument(span.clone())
        .await
        .map_err(run_error)?;
    tracing::info!(
        user_id = %user_id,
        session_id = %session_id,
        invocation_id = run.invocation_id,
        streaming = request.streaming,
        "turn-based run"
    );
    Ok(Started {
        run,
        _slot: slot,
        _span: span,
    })
}

/// Refuses a client's state delta that would take the session's state past its quota (reading
/// the session's state only when there is a quota to keep).
async fn check_state_quota(
    gateway: &Gateway,
    principal: &Principal,
    user_id: &PathId,
    session_id: &PathId,
    delta: &Map<String, Value>,
) -> Result<(), Response> {
    if delta.is_empty()
        || gateway.quotas.state_bytes == 0
        || !matches!(principal, Principal::Client(_))
    {
        return Ok(());
    }
    let config = crate::session::GetSessionConfig {
        num_recent_events: Some(0),
        after_timestamp: None,
    };
    let session = gateway
        .runner
        .sessions
        .get_session(
            &gateway.runner.app_name,
            user_id.as_str(),
            session_id.as_str(),
            &config,
        )
        .await
        .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let current = session.map(|s| s.state).unwrap_or_default();
    gateway
        .quotas
        .check_state(&gateway.limits.counters, principal, &current, delta)
        .map_err(IntoResponse::into_response)
}

/// `POST /run`: runs a turn and answers with every event, once it is over.
pub(crate) async fn run(
    State(gateway): State<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    match start(&gateway, &principal, &headers, &body).await {
        Ok(started) => {
            let events = started.run.events.collect::<Vec<_>>().await;
            Json(events).into_response()
        }
        Err(response) => response,
    }
}

/// `POST /run_sse`: runs a turn and streams each event as it is committed.
pub(crate) async fn run_sse(
    State(gateway): State<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    match start(&gateway, &principal, &headers, &body).await {
        Ok(Started {
            run,
            _slot: slot,
            _span: span,
        }) => {
            // The slot goes with the stream: the run is live until its last event is sent.
            let events = run.events.map(move |event| {
                let _live = (&slot, &span);
                let data = serde_json::to_string(&event)
                    .unwrap_or_else(|e| json!({ "error": e.to_string() }).to_string());
                Ok::<_, Infallible>(SseEvent::default().data(data))
            });
            Sse::new(events)
                .keep_alive(KeepAlive::default())
                .into_response()
        }
        Err(response) => response,
    }
}

/// `POST /apps/{app}/users/{user}/sessions[/{session}]` with an optional `{"state": {...}}` body:
/// creates a session (ADK's API server route), 409 if it exists.
pub(crate) async fn create_session(
    State(gateway): State<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    Path(path): Path<Vec<(String, String)>>,
    body: Bytes,
) -> Response {
    let get = |key: &str| path.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    if get("app_name") != Some(gateway.runner.app_name.as_str()) {
        return error(StatusCode::NOT_FOUND, "app not found");
    }
    let state = if body.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        #[derive(Deserialize)]
        struct CreateSession {
            #[serde(default)]
            state: Map<String, Value>,
        }
        match serde_json::from_slice::<CreateSession>(&body) {
            Ok(request) => request.state,
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid body: {e}")),
        }
    };
    let user_id = get("user_id").unwrap_or_default();
    let mut response =
        crate::gateway::http::rest::create(&gateway, &principal, user_id, get("session_id"), state)
            .await;
    // ADK's API server answers a created session with 200.
    if response.status() == StatusCode::CREATED {
        *response.status_mut() = StatusCode::OK;
    }
    response
}
