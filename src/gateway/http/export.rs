//! `GET /api/sessions/{user}/{session}/export`: a session as a replay bundle (docs/REPLAY.md), one
//! uncompressed tar stream holding one folder named after the session:
//!
//! - `events.jsonl`: the stored events, oldest first, one JSON object a line, without what may
//!   not leave the gateway (model resumption handles; `temp:` state is never stored);
//! - `recordings/{name}`: each audio recording the events announce, as stored (raw PCM);
//! - `bundle.json`, last: the format and its version, the session's ids and state (without
//!   `temp:` keys), and every other file with its size and SHA-256, so a reader finds a missing
//!   or damaged file by name.
//!
//! A tar rather than a zip or a compressed stream: it is written as it is read (a recording at a
//! time in memory, never the whole bundle), any system unpacks it, and PCM barely compresses.
//! The bundle's size is known before the first byte goes out: a session over [`MAX_EXPORT_BYTES`]
//! is refused (413) rather than cut short.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde_json::{json, Map, Value};

use super::error::{api_error, ApiError};
use super::rest::{artifact_scope, existing_session};
use crate::event::Event;
use crate::gateway::auth::Principal;
use crate::gateway::state::Gateway;
use crate::session::state::TEMP_PREFIX;
use crate::session::Session;

/// The bundle format's name and version, written in `bundle.json`.
pub const BUNDLE_FORMAT: &str = "livegate-replay-bundle";
/// Version 1: `events.jsonl`, `recordings/`, `bundle.json` with `files`.
pub const BUNDLE_VERSION: u64 = 1;
/// Largest bundle served: an hour of a call's recordings (in and out) with room for its events.
pub const MAX_EXPORT_BYTES: u64 = 512 * 1024 * 1024;
/// Events read from the store at a time.
const READ_CHUNK: usize = 200;
/// Tar's block.
const BLOCK: usize = 512;

/// An audio recording an event announced: its artifact name and version, and which side.
#[derive(Debug, Clone, PartialEq)]
struct RecordingRef {
    name: String,
    version: Option<u64>,
    side: &'static str,
    started: f64,
}

/// `GET /api/sessions/{user}/{session}/export`.
pub(crate) async fn export_session(
    State(gateway): State<Arc<Gateway>>,
    Extension(principal): Extension<Principal>,
    Path((user_id, session_id)): Path<(String, String)>,
) -> Response {
    let result = async {
        let session = existing_session(&gateway, &principal, &user_id, &session_id).await?;
        let (events, recordings) = read_events(&gateway, &session).await?;
        let mut total = events.len() as u64;
        for recording in &recordings {
            let info = gateway
                .runner
                .artifacts
                .describe(artifact_scope(&session), &recording.name)
                .await
                .map_err(internal)?;
            total += info.map_or(0, |i| i.size);
            if total > MAX_EXPORT_BYTES {
                return Err(api_error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "session {} is over the export limit of {MAX_EXPORT_BYTES} bytes",
                        session.id
                    ),
                ));
            }
        }
        let filename = format!("{}.tar", session.id);
        let body = Body::from_stream(bundle_stream(gateway.clone(), session, events, recordings));
        Ok::<_, ApiError>(
            (
                [
                    (header::CONTENT_TYPE, "application/x-tar".to_owned()),
                    (
                        header::CONTENT_DISPOSITION,
                        format!("attachment; filename=\"{filename}\""),
                    ),
                    (header::CACHE_CONTROL, "no-store".to_owned()),
                ],
                body,
            )
                .into_response(),
        )
    };
    result.await.unwrap_or_else(IntoResponse::into_response)
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "export failed");
    api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// The session's events as JSON lines (what may not leave removed) and the recordings they
/// announce, bounded by [`MAX_EXPORT_BYTES`].
async fn read_events(
    gateway: &Gateway,
    session: &Session,
) -> Result<(Vec<u8>, Vec<RecordingRef>), ApiError> {
    let mut lines = Vec::new();
    let mut recordings = Vec::new();
    let mut offset = 0;
    loop {
        let chunk = gateway
            .runner
            .sessions
            .list_events(
                &session.app_name,
                &session.user_id,
                &session.id,
                offset,
                READ_CHUNK,
            )
            .await
            .map_err(internal)?
            .ok_or_else(|| {
                api_error(
                    StatusCode::NOT_FOUND,
                    format!("session {} not found", session.id),
                )
            })?;
        let read = chunk.events.len();
        for event in chunk.events {
            recordings.extend(recording_of(&event));
            let Some(value) = exported_event(event) else {
                continue;
            };
            serde_json::to_writer(&mut lines, &value).map_err(internal)?;
            lines.push(b'\n');
            if lines.len() as u64 > MAX_EXPORT_BYTES {
                return Err(api_error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "session {} has over {MAX_EXPORT_BYTES} bytes of events",
                        session.id
                    ),
                ));
            }
        }
        offset += read;
        if read < READ_CHUNK {
            return Ok((lines, recordings));
        }
    }
}

/// An event as exported: resumption handles (they would let a reader resume the model's own
/// context) and `temp:` state removed; `None` for an event that carried nothing else.
fn exported_event(mut event: Event) -> Option<Value> {
    let only_handle = event.live_session_resumption_update.is_some()
        && event.content.is_none()
        && event.turn_complete.is_none();
    if only_handle {
        return None;
    }
    event.live_session_resumption_update = None;
    event
        .actions
        .state_delta
        .retain(|key, _| !key.starts_with(TEMP_PREFIX));
    serde_json::to_value(event).ok()
}

/// The recording an event announces (`fileData` with a live audio recording's URI).
fn recording_of(event: &Event) -> Option<RecordingRef> {
    let part = event
        .content
        .as_ref()?
        .parts
        .iter()
        .find_map(|p| p.file_data.as_ref())?;
    let (path, version) = part
        .file_uri
        .rsplit_once('#')
        .map_or((part.file_uri.as_str(), None), |(p, v)| (p, v.parse().ok()));
    let name = path.rsplit('/').next()?;
    let side = if name.starts_with("adk_live_audio_storage_input_audio_") {
        "input"
    } else if name.starts_with("adk_live_audio_storage_output_audio_") {
        "output"
    } else {
        return None;
    };
    // The name goes into the tar and onto a reader's disk: plain characters only.
    let plain = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    (plain && name.len() <= 90).then(|| RecordingRef {
        name: name.to_owned(),
        version,
        side,
        started: event.timestamp,
    })
}

/// The tar, entry by entry: events, each recording (loaded one at a time), then `bundle.json`.
fn bundle_stream(
    gateway: Arc<Gateway>,
    session: Session,
    events: Vec<u8>,
    recordings: Vec<RecordingRef>,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    async_stream::try_stream! {
        let mut files = Vec::new();
        files.push(json!({
            "path": "events.jsonl",
            "bytes": events.len(),
            "sha256": sha256(&events),
        }));
        yield entry(&session.id, "events.jsonl", events)?;
        for recording in &recordings {
            let loaded = gateway
                .runner
                .artifacts
                .load(artifact_scope(&session), &recording.name, recording.version)
                .await
                .map_err(io_error)?;
            // A recording deleted since the listing is left out, and so not in `files`.
            let Some(artifact) = loaded else { continue };
            let path = format!("recordings/{}", recording.name);
            files.push(json!({
                "path": path,
                "bytes": artifact.data.len(),
                "sha256": sha256(&artifact.data),
                "mimeType": artifact.mime_type,
                "side": recording.side,
                "started": recording.started,
            }));
            yield entry(&session.id, &path, artifact.data.to_vec())?;
        }
        let manifest = manifest(&session, files);
        let manifest = serde_json::to_vec_pretty(&manifest).map_err(io_error)?;
        yield entry(&session.id, "bundle.json", manifest)?;
        // The end of an archive: two empty blocks.
        yield Bytes::from(vec![0u8; 2 * BLOCK]);
    }
}

fn io_error(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// `bundle.json`: the format, the session, and the files.
fn manifest(session: &Session, files: Vec<Value>) -> Value {
    let state: Map<String, Value> = session
        .state
        .iter()
        .filter(|(key, _)| !key.starts_with(TEMP_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    json!({
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "appName": session.app_name,
        "userId": session.user_id,
        "sessionId": session.id,
        "lastUpdateTime": session.last_update_time,
        "exportedBy": crate::BUILD,
        "state": state,
        "files": files,
    })
}

/// Hex SHA-256.
fn sha256(data: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One tar entry: a ustar header for `{folder}/{path}` (the folder in the header's prefix field,
/// so session ids up to its 155 bytes fit), the data, and padding to the block.
fn entry(folder: &str, path: &str, data: Vec<u8>) -> Result<Bytes, std::io::Error> {
    let mut out = ustar_header(folder, path, data.len() as u64)?;
    out.extend_from_slice(&data);
    let pad = (BLOCK - data.len() % BLOCK) % BLOCK;
    out.resize(out.len() + pad, 0);
    Ok(Bytes::from(out))
}

/// A ustar header block for a regular file.
fn ustar_header(prefix: &str, name: &str, size: u64) -> Result<Vec<u8>, std::io::Error> {
    if name.len() > 100 || prefix.len() > 155 {
        return Err(io_error(format!("tar name too long: {prefix}/{name}")));
    }
    let mut header = vec![0u8; BLOCK];
    let mut put = |at: usize, value: &[u8]| header[at..at + value.len()].copy_from_slice(value);
    put(0, name.as_bytes());
    put(100, b"0000644\0");
    put(108, b"0000000\0");
    put(116, b"0000000\0");
    put(124, format!("{size:011o}\0").as_bytes());
    put(136, b"00000000000\0");
    put(156, b"0");
    put(257, b"ustar\0");
    put(263, b"00");
    put(345, prefix.as_bytes());
    // The checksum is computed with its own field as spaces.
    put(148, b"        ");
    let sum: u32 = header.iter().map(|&b| u32::from(b)).sum();
    header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_have_ustar_checksums_and_blocks() {
        let header = ustar_header("s1", "events.jsonl", 1234).unwrap();
        assert_eq!(header.len(), BLOCK);
        let stored = std::str::from_utf8(&header[148..154]).unwrap();
        let mut blank = header.clone();
        blank[148..156].copy_from_slice(b"        ");
        let sum: u32 = blank.iter().map(|&b| u32::from(b)).sum();
        assert_eq!(u32::from_str_radix(stored, 8).unwrap(), sum);
        assert_eq!(&header[124..135], b"00000002322");
        assert!(ustar_header("s1", &"x".repeat(101), 0).is_err());
        let entry = entry("s1", "a", vec![1; 513]).unwrap();
        assert_eq!(entry.len(), BLOCK * 3);
    }

    #[test]
    fn only_live_recordings_with_plain_names_are_exported() {
        let event = |uri: &str| {
            let mut e = Event::new("inv", "user");
            e.timestamp = 12.5;
            e.content = Some(crate::event::Content {
                parts: vec![crate::event::Part {
                    file_data: Some(crate::event::FileData {
                        display_name: None,
                        file_uri: uri.into(),
                        mime_type: None,
                    }),
                    ..Default::default()
                }],
                role: Some("user".into()),
            });
            e
        };
        let found = recording_of(&event(
            "artifact://a/u/s/_adk_live/adk_live_audio_storage_input_audio_12500.pcm#3",
        ))
        .unwrap();
        assert_eq!(
            (found.name.as_str(), found.version, found.side),
            (
                "adk_live_audio_storage_input_audio_12500.pcm",
                Some(3),
                "input"
            )
        );
        assert!(recording_of(&event("artifact://a/u/s/_adk_live/notes.txt#0")).is_none());
        assert!(recording_of(&event(
            "artifact://a/u/s/_adk_live/adk_live_audio_storage_input_audio_1 2.pcm#0"
        ))
        .is_none());
    }
}
