//! The REST API: a user's sessions (list, create, read with paginated events, delete)
//! and a session's artifacts (list, download; audio as WAV for browsers).

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::artifact::{ArtifactError, ArtifactScope};
use crate::event::Blob;
use crate::gateway::auth::Principal;
use crate::gateway::http::error::{api_error, ApiError};
use crate::gateway::ids::PathId;
use crate::gateway::media;
use crate::gateway::state::Gateway;
use crate::session::{GetSessionConfig, Session, SessionError};

/// Events per page when the request names no limit.
const DEFAULT_PAGE: usize = 100;
/// Most events one page may hold.
const MAX_PAGE: usize = 1000;
/// Most bytes of events (as JSON) one page holds: fewer events than asked for when they are
/// large, but always at least one, so paging by `nextOffset` goes on.
const MAX_PAGE_BYTES: usize = 1024 * 1024;
/// Events read from the store at a time while a page fills: what a page holds in memory at most
/// beside its bytes.
const READ_CHUNK: usize = 50;

fn bad_request(message: impl std::fmt::Display) -> ApiError {
    api_error(StatusCode::BAD_REQUEST, message.to_string())
}

fn session_error(e: SessionError) -> ApiError {
    let status = match &e {
        SessionError::NotFound(_) => StatusCode::NOT_FOUND,
        SessionError::AlreadyExists(_) => StatusCode::CONFLICT,
        SessionError::InvalidArgument(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    if status == StatusCode::INTERNAL_SERVER_ERROR {
        tracing::error!(error = %e, "session store failed");
    }
    api_error(status, e.to_string())
}

fn artifact_error(e: ArtifactError) -> ApiError {
    match &e {
        ArtifactError::InvalidName(_) | ArtifactError::InvalidArgument(_) => {
            bad_request(e.to_string())
        }
        _ => {
            tracing::error!(error = %e, "artifact store failed");
            api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
    }
}

/// A session without its events (they are paged separately).
fn summary(session: &Session) -> Value {
    json!({
        "appName": session.app_name,
        "userId": session.user_id,
        "id": session.id,
        "state": session.state,
        "lastUpdateTime": session.last_update_time,
        "usage": crate::runner::usage::UsageTotals::of_state(&session.state),
    })
}

/// Creates a session for the REST API and ADK's API-server route alike: 201 with the session,
/// 409 when the id is taken. A session-bound token creates its own session only.
pub(crate) async fn create(
    gateway: &Gateway,
    principal: &Principal,
    user_id: &str,
    session_id: Option<&str>,
    state: Map<String, Value>,
) -> Response {
    let user = match PathId::parse("user id", user_id) {
        Ok(id) => id,
        Err(m) => return bad_request(m).into_response(),
    };
    let session = match session_id.map(PathId::new_session).transpose() {
        Ok(id) => id,
        Err(m) => return bad_request(m).into_response(),
    };
    let session = session.or_else(|| principal.session().cloned());
    let allowed = match &session {
        Some(session) => principal.check_session(user.as_str(), session.as_str()),
        None => principal.check_user(user.as_str()),
    }
    .and_then(|()| principal.check_state(&state));
    if let Err(denied) = allowed {
        return denied.into_response();
    }
    let quotas = &gateway.quotas;
    let counters = &gateway.limits.counters;
    let admitted = match quotas.check_state(counters, principal, &Map::new(), &state) {
        Ok(()) => {
            quotas
                .admit_new_session(&gateway.runner, counters, principal, user.as_str())
                .await
        }
        Err(refused) => Err(refused),
    };
    if let Err(refused) = admitted {
        return refused.into_response();
    }
    let created = gateway
        .runner
        .sessions
        .create_session(
            &gateway.runner.app_name,
            user.as_str(),
            session.as_ref().map(PathId::as_str),
            state,
        )
        .await;
    match created {
        Ok(session) => (StatusCode::CREATED, Json(summary(&session))).into_response(),
        Err(e) => session_error(e).into_response(),
    }
}

/// `GET /api/sessions?user_id=U`: the user's sessions, most recently updated first. A client
/// token lists its own user's (the default for it), a session-bound one only its session.
/// `GET /api/users/{user}/usage`: the user's usage totals, summed over their sessions (the
/// sessions a session-bound token may see only), with how many sessions that is.
pub(crate) async fn user_usage(
    State(gateway): State<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    Path(user_id): Path<String>,
) -> Response {
    let user = match PathId::parse("user id", &user_id) {
        Ok(id) => id,
        Err(m) => return bad_request(m).into_response(),
    };
    if let Err(denied) = principal.check_user(user.as_str()) {
        return denied.into_response();
    }
    let sessions = match gateway
        .runner
        .sessions
        .list_sessions(&gateway.runner.app_name, user.as_str())
        .await
    {
        Ok(sessions) => sessions,
        Err(e) => return session_error(e).into_response(),
    };
    let mut totals = crate::runner::usage::UsageTotals::default();
    let mut counted = 0;
    for session in sessions.iter().filter(|s| {
        principal
            .session()
            .is_none_or(|bound| bound.as_str() == s.id)
    }) {
        totals.merge(&crate::runner::usage::UsageTotals::of_state(&session.state));
        counted += 1;
    }
    Json(json!({ "userId": user.as_str(), "sessions": counted, "usage": totals })).into_response()
}

pub(crate) async fn list_sessions(
    State(gateway): State<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let named = query.get("user_id").or_else(|| query.get("userId"));
    let Some(user_id) = named
        .map(String::as_str)
        .or(principal.user().map(PathId::as_str))
    else {
        return bad_request("user_id is required").into_response();
    };
    let user = match PathId::parse("user id", user_id) {
        Ok(id) => id,
        Err(m) => return bad_request(m).into_response(),
    };
    if let Err(denied) = principal.check_user(user.as_str()) {
        return denied.into_response();
    }
    match gateway
        .runner
        .sessions
        .list_sessions(&gateway.runner.app_name, user.as_str())
        .await
    {
        Ok(sessions) => {
            let visible = sessions
                .iter()
                .filter(|s| {
                    principal
                        .session()
                        .is_none_or(|bound| bound.as_str() == s.id)
                })
                .map(summary)
                .collect::<Vec<_>>();
            Json(json!({ "sessions": visible })).into_response()
        }
        Err(e) => session_error(e).into_response(),
    }
}

/// The body of `POST /api/sessions`.
#[derive(Debug, Deserialize)]
struct CreateSession {
    #[serde(alias = "user_id", rename = "userId")]
    user_id: String,
    #[serde(default, alias = "session_id", rename = "sessionId")]
    session_id: Option<String>,
    #[serde(default)]
    state: Map<String, Value>,
}

/// `POST /api/sessions` with `{"userId", "sessionId"?, "state"?}`.
pub(crate) async fn create_session(
    State(gateway): State<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    body: Bytes,
) -> Response {
    match serde_json::from_slice::<CreateSession>(&body) {
        Ok(request) => {
            create(
                &gateway,
                &principal,
                &request.user_id,
                request.session_id.as_deref(),
                request.state,
            )
            .await
        }
        Err(e) => bad_request(format!("invalid body: {e}")).into_response(),
    }
}

/// The session a path names: 400 for a bad id, 403 when the principal may not reach it (before
/// looking, so a refusal tells nothing about whether it exists), 404 when it does not exist.
pub(crate) async fn existing_session(
    gateway: &Gateway,
    principal: &Principal,
    user_id: &str,
    session_id: &str,
) -> Result<Session, ApiError> {
    let user = PathId::parse("user id", user_id).map_err(bad_request)?;
    let session = PathId::parse("session id", session_id).map_err(bad_request)?;
    principal.check_session(user.as_str(), session.as_str())?;
    gateway
        .runner
        .sessions
        .get_session(
            &gateway.runner.app_name,
            user.as_str(),
            session.as_str(),
            // The events are paged separately; none are read here.
            &GetSessionConfig {
                num_recent_events: Some(0),
                after_timestamp: None,
            },
        )
        .await
        .map_err(session_error)?
        .ok_or_else(|| {
            api_error(
                StatusCode::NOT_FOUND,
                format!("session {session} not found"),
            )
        })
}

/// Where a session's artifacts live.
pub(crate) fn artifact_scope(session: &Session) -> ArtifactScope<'_> {
    ArtifactScope {
        app_name: &session.app_name,
        user_id: &session.user_id,
        session_id: &session.id,
    }
}

/// An optional non-negative integer query parameter.
fn number<T: std::str::FromStr>(
    query: &HashMap<String, String>,
    name: &str,
) -> Result<Option<T>, ApiError> {
    query
        .get(name)
        .map(|v| {
            v.parse().map_err(|_| {
                bad_request(format!("{name} must be a non-negative integer, not {v:?}"))
            })
        })
        .transpose()
}

/// `GET /api/sessions/{user}/{session}?offset=N&limit=M`: state and a page of events, oldest
/// first: at most `limit` events and about [`MAX_PAGE_BYTES`] of them, with `nextOffset` where
/// the next page starts.
pub(crate) async fn get_session(
    State(gateway): State<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    Path((user_id, session_id)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let result = async {
        let offset = number(&query, "offset")?.unwrap_or(0);
        let limit = number(&query, "limit")?.unwrap_or(DEFAULT_PAGE);
        if limit == 0 || limit > MAX_PAGE {
            return Err(bad_request(format!("limit must be 1..={MAX_PAGE}")));
        }
        let session = existing_session(&gateway, &principal, &user_id, &session_id).await?;
        let page = read_page(&gateway, &session, offset, limit).await?;
        let head = serde_json::to_string(&summary(&session))
            .map_err(|e| api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
        let body = format!(
            "{{\"session\":{head},\"events\":[{}],\"total\":{},\"offset\":{offset},\"limit\":{limit},\"nextOffset\":{}}}",
            page.events, page.total, offset + page.count
        );
        Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// A page of events as JSON array items, and how many, with the session's event count.
struct JsonPage {
    events: String,
    count: usize,
    total: usize,
}

/// Reads up to `limit` events from `offset`, a chunk at a time, until the page holds
/// [`MAX_PAGE_BYTES`]: six readers of pages of large events cannot hold gigabytes.
async fn read_page(
    gateway: &Gateway,
    session: &Session,
    offset: usize,
    limit: usize,
) -> Result<JsonPage, ApiError> {
    let mut page = JsonPage {
        events: String::new(),
        count: 0,
        total: 0,
    };
    while page.count < limit {
        let want = (limit - page.count).min(READ_CHUNK);
        let chunk = gateway
            .runner
            .sessions
            .list_events(
                &session.app_name,
                &session.user_id,
                &session.id,
                offset + page.count,
                want,
            )
            .await
            .map_err(session_error)?
            .ok_or_else(|| {
                api_error(
                    StatusCode::NOT_FOUND,
                    format!("session {} not found", session.id),
                )
            })?;
        page.total = chunk.total;
        let read = chunk.events.len();
        for event in &chunk.events {
            let json = serde_json::to_string(event)
                .map_err(|e| api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
            if page.count > 0 && page.events.len() + json.len() > MAX_PAGE_BYTES {
                return Ok(page);
            }
            if page.count > 0 {
                page.events.push(',');
            }
            page.events.push_str(&json);
            page.count += 1;
        }
        if read < want {
            break;
        }
    }
    Ok(page)
}

/// `DELETE /api/sessions/{user}/{session}`: 204, or 404 for an unknown session.
pub(crate) async fn delete_session(
    State(gateway): State<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    Path((user_id, session_id)): Path<(String, String)>,
) -> Response {
    let result = async {
        let session = existing_session(&gateway, &principal, &user_id, &session_id).await?;
        gateway
            .runner
            .sessions
            .delete_session(&session.app_name, &session.user_id, &session.id)
            .await
            .map_err(session_error)?;
        tracing::info!(
            user_id = session.user_id,
            session_id = session.id,
            "session deleted"
        );
        Ok::<_, ApiError>(StatusCode::NO_CONTENT.into_response())
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// `GET /api/sessions/{user}/{session}/artifacts`: names, versions, and the latest version's mime
/// type and size.
pub(crate) async fn list_artifacts(
    State(gateway): State<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    Path((user_id, session_id)): Path<(String, String)>,
) -> Response {
    let result = async {
        let session = existing_session(&gateway, &principal, &user_id, &session_id).await?;
        let store = &gateway.runner.artifacts;
        let scope = artifact_scope(&session);
        let mut artifacts = Vec::new();
        for name in store.list_names(scope).await.map_err(artifact_error)? {
            // Metadata only: a listing never reads the recordings themselves.
            let Some(info) = store.describe(scope, &name).await.map_err(artifact_error)? else {
                continue;
            };
            artifacts.push(json!({
                "name": name,
                "versions": info.versions,
                "mimeType": info.mime_type,
                "size": info.size,
            }));
        }
        Ok::<_, ApiError>(Json(json!({ "artifacts": artifacts })).into_response())
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// `GET /api/sessions/{user}/{session}/artifacts/{name}?version=N&format=wav|raw`.
pub(crate) async fn download_artifact(
    State(gateway): State<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    Path((user_id, session_id, name)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let result = async {
        let version = number::<u64>(&query, "version")?;
        let wav = match query.get("format").map(String::as_str) {
            None | Some("raw") => false,
            Some("wav") => true,
            Some(other) => {
                return Err(bad_request(format!(
                    "format must be wav or raw, not {other:?}"
                )))
            }
        };
        let session = existing_session(&gateway, &principal, &user_id, &session_id).await?;
        let artifact = gateway
            .runner
            .artifacts
            .load(artifact_scope(&session), &name, version)
            .await
            .map_err(artifact_error)?
            .ok_or_else(|| {
                api_error(
                    StatusCode::NOT_FOUND,
                    format!("artifact {name:?} not found"),
                )
            })?;
        let (mime, body) = if wav {
            let blob = Blob::new(artifact.data, artifact.mime_type);
            if !blob.is_pcm() {
                return Err(bad_request(format!(
                    "format=wav needs PCM audio; {name:?} is {:?}",
                    media::served_type(&blob.mime_type)
                )));
            }
            let rate = blob.sample_rate().unwrap_or(DEFAULT_PCM_RATE);
            ("audio/wav".to_owned(), wav_file(&blob.data, rate))
        } else {
            (media::served_type(&artifact.mime_type), artifact.data)
        };
        let download_name = if wav {
            format!("{}.wav", name.trim_end_matches(".pcm"))
        } else {
            name.clone()
        };
        Ok((media::download_headers(&mime, &download_name), body).into_response())
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

/// PCM whose mime type names no rate is taken to be 16 kHz (ADK's input audio).
const DEFAULT_PCM_RATE: u32 = 16_000;

/// A WAV file of 16-bit mono little-endian PCM at `rate` Hz: the 44-byte RIFF header, then the data.
pub fn wav_file(pcm: &[u8], rate: u32) -> Bytes {
    // Whole samples only: a stray odd byte would make the data chunk invalid.
    let data = &pcm[..pcm.len() - pcm.len() % 2];
    let data_len = u32::try_from(data.len()).unwrap_or(u32::MAX - 36);
    let mut wav = Vec::with_capacity(44 + data.len());
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + data_len).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes()); // fmt chunk size
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&1u16.to_le_bytes()); // mono
    wav.extend_from_slice(&rate.to_le_bytes());
    wav.extend_from_slice(&(rate * 2).to_le_bytes()); // bytes per second
    wav.extend_from_slice(&2u16.to_le_bytes()); // block align
    wav.extend_from_slice(&16u16.to_le_bytes()); // bits per sample
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&data_len.to_le_bytes());
    wav.extend_from_slice(data);
    Bytes::from(wav)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wav_files_read_back_with_hound() {
        let pcm: Vec<u8> = [1i16, -2, 300, -32768]
            .iter()
            .flat_map(|s| s.to_le_bytes())
            .collect();
        let mut odd = pcm.clone();
        odd.push(7);
        let wav = wav_file(&odd, 24_000);
        assert_eq!(wav.len(), 44 + pcm.len());
        let mut reader = hound::WavReader::new(std::io::Cursor::new(wav.to_vec())).unwrap();
        let spec = reader.spec();
        assert_eq!(
            (spec.channels, spec.sample_rate, spec.bits_per_sample),
            (1, 24_000, 16)
        );
        let samples: Vec<i16> = reader.samples::<i16>().map(Result::unwrap).collect();
        assert_eq!(samples, vec![1, -2, 300, -32768]);
        let pcm = |mime: &str| Blob::new(Bytes::new(), mime).is_pcm();
        assert!(pcm("audio/pcm;rate=16000") && pcm(" audio/L16") && !pcm("audio/wav"));
    }
}
