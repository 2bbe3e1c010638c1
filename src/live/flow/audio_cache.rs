//! The live audio cache (`save_live_blob`): input and output audio per turn, flushed to artifacts
//! as `adk_live_audio_storage_{input|output}_audio_{first_chunk_ms}.{ext}` with a `fileData` event.

use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};

use crate::artifact::{Artifact, ArtifactScope, ArtifactService};
use crate::event::{now_timestamp, Blob, Content, Event, FileData, Part};

/// One side's audio of the current turn. The first chunk names the file (its time) and the
/// mime type; later chunks only add bytes, so caching a chunk is one refcounted `Bytes` push.
#[derive(Debug, Clone, Default)]
struct Recording {
    mime_type: String,
    started: f64,
    chunks: Vec<Bytes>,
}

/// Which side of the conversation a recording holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AudioSide {
    /// The user's microphone.
    Input,
    /// The model's voice.
    Output,
}

impl AudioSide {
    fn label(self) -> &'static str {
        match self {
            AudioSide::Input => "input",
            AudioSide::Output => "output",
        }
    }
}

/// Cached audio of the current turn, shared by the send loop (input) and receive loop (output).
///
/// The lock is only held to push or swap out a list, never across an `.await`.
#[derive(Debug, Clone, Default)]
pub struct AudioCache {
    inner: Arc<Mutex<[Recording; 2]>>,
}

/// Where flushed recordings go and how their events are attributed.
#[derive(Debug, Clone)]
pub struct RecordingTarget {
    /// Artifact store; `None` keeps the audio cached (nothing is lost, nothing is saved).
    pub artifacts: Option<Arc<dyn ArtifactService>>,
    /// Application name.
    pub app_name: String,
    /// User id.
    pub user_id: String,
    /// Session id.
    pub session_id: String,
    /// Invocation id of the run.
    pub invocation_id: String,
    /// Author of output recordings (the agent).
    pub agent_name: String,
}

impl AudioCache {
    /// Caches an audio blob (non-audio blobs are ignored, as in ADK 2.13).
    pub fn push(&self, side: AudioSide, blob: &Blob) {
        if !blob.is_audio() || blob.data.is_empty() {
            return;
        }
        if let Ok(mut sides) = self.inner.lock() {
            let recording = &mut sides[side as usize];
            if recording.chunks.is_empty() {
                recording.mime_type.clone_from(&blob.mime_type);
                recording.started = now_timestamp();
            }
            recording.chunks.push(blob.data.clone());
        }
    }

    fn take(&self, side: AudioSide) -> Recording {
        self.inner
            .lock()
            .map(|mut sides| std::mem::take(&mut sides[side as usize]))
            .unwrap_or_default()
    }

    /// Puts back a recording that could not be saved, ahead of audio cached since.
    fn restore(&self, side: AudioSide, mut recording: Recording) {
        if let Ok(mut sides) = self.inner.lock() {
            let newer = std::mem::take(&mut sides[side as usize]);
            recording.chunks.extend(newer.chunks);
            sides[side as usize] = recording;
        }
    }

    /// Saves the cached audio of the chosen sides and returns the events to yield: a `fileData`
    /// event per saved recording, or an error event when a save failed (the audio stays cached).
    pub async fn flush(&self, target: &RecordingTarget, input: bool, output: bool) -> Vec<Event> {
        let mut events = Vec::new();
        let sides = [(input, AudioSide::Input), (output, AudioSide::Output)];
        for side in sides.into_iter().filter(|(on, _)| *on).map(|(_, s)| s) {
            let Some(artifacts) = &target.artifacts else {
                continue;
            };
            let recording = self.take(side);
            if recording.chunks.is_empty() {
                continue;
            }
            let mime_type = recording.mime_type.clone();
            let timestamp = recording.started;
            let mut data = BytesMut::with_capacity(recording.chunks.iter().map(Bytes::len).sum());
            for chunk in &recording.chunks {
                data.extend_from_slice(chunk);
            }
            let ext = mime_type
                .split(';')
                .next()
                .and_then(|t| t.split('/').nth(1))
                .unwrap_or("pcm")
                .trim()
                .to_owned();
            let filename = format!(
                "adk_live_audio_storage_{}_audio_{}.{ext}",
                side.label(),
                (timestamp * 1000.0) as u64
            );
            let scope = ArtifactScope {
                app_name: &target.app_name,
                user_id: &target.user_id,
                session_id: &target.session_id,
            };
            let artifact = Artifact {
                data: data.freeze(),
                mime_type: mime_type.clone(),
            };
            match artifacts.save(scope, &filename, artifact).await {
                Ok(version) => {
                    let (author, role) = match side {
                        AudioSide::Input => ("user", "user"),
                        AudioSide::Output => (target.agent_name.as_str(), "model"),
                    };
                    let mut event = Event::new(&target.invocation_id, author);
                    event.timestamp = timestamp;
                    event.content = Some(Content {
                        parts: vec![Part {
                            file_data: Some(FileData {
                                display_name: None,
                                file_uri: format!(
                                    "artifact://{}/{}/{}/_adk_live/{filename}#{version}",
                                    target.app_name, target.user_id, target.session_id
                                ),
                                mime_type: Some(mime_type),
                            }),
                            ..Part::default()
                        }],
                        role: Some(role.into()),
                    });
                    events.push(event);
                }
                Err(error) => {
                    tracing::warn!(%error, filename, "saving a live audio recording failed; keeping it cached");
                    self.restore(side, recording);
                    events.push(Event::error(
                        &target.invocation_id,
                        &target.agent_name,
                        error.code(),
                        format!("could not save audio recording {filename}: {error}"),
                    ));
                }
            }
        }
        events
    }
}
