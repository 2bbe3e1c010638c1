//! What a flow asks of a model when connecting, and what it sends during the session.

use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::{Blob, Content, FunctionResponse};

/// A response modality.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Modality {
    /// Spoken answers (with output transcription).
    Audio,
    /// Text answers.
    Text,
}

impl std::str::FromStr for Modality {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_uppercase().as_str() {
            "AUDIO" => Ok(Modality::Audio),
            "TEXT" => Ok(Modality::Text),
            other => Err(format!(
                "unknown modality {other:?} (expected AUDIO or TEXT)"
            )),
        }
    }
}

/// A tool's declaration as the model sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FunctionDeclaration {
    /// Function name.
    pub name: String,
    /// What the function does.
    #[serde(default)]
    pub description: String,
    /// JSON schema of the arguments; shared, since every connection's config carries it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters_json_schema: Option<Arc<Value>>,
}

/// Voice activity detection settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RealtimeInputConfig {
    /// Automatic (server-side) voice activity detection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automatic_activity_detection: Option<AutomaticActivityDetection>,
    /// What user activity does to a model answer (`START_OF_ACTIVITY_INTERRUPTS`, `NO_INTERRUPTION`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity_handling: Option<String>,
}

impl RealtimeInputConfig {
    /// True when automatic voice activity detection is turned off (manual activity signals).
    pub fn automatic_detection_disabled(&self) -> bool {
        self.automatic_activity_detection
            .as_ref()
            .and_then(|a| a.disabled)
            .unwrap_or(false)
    }
}

/// Automatic voice activity detection settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AutomaticActivityDetection {
    /// Turn automatic detection off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    /// `START_SENSITIVITY_HIGH` / `START_SENSITIVITY_LOW`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_of_speech_sensitivity: Option<String>,
    /// `END_SENSITIVITY_HIGH` / `END_SENSITIVITY_LOW`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_of_speech_sensitivity: Option<String>,
    /// Speech required before a start is committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_padding_ms: Option<u32>,
    /// Silence required before an end is committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silence_duration_ms: Option<u32>,
}

/// Session resumption settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionResumptionConfig {
    /// Resume the session this handle names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handle: Option<String>,
    /// Transparent resumption (Vertex only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transparent: Option<bool>,
}

/// Everything a backend needs to open a live session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveConnectConfig {
    /// Model id.
    pub model: String,
    /// System instruction.
    pub system_instruction: Option<String>,
    /// Tools the model may call.
    pub tools: Vec<FunctionDeclaration>,
    /// Response modalities (one of them, in practice).
    pub response_modalities: Vec<Modality>,
    /// Speech config (voice), passed through as JSON.
    pub speech_config: Option<Value>,
    /// Transcribe the user's audio.
    pub input_audio_transcription: bool,
    /// Transcribe the model's audio.
    pub output_audio_transcription: bool,
    /// Voice activity detection settings.
    pub realtime_input_config: Option<RealtimeInputConfig>,
    /// Session resumption settings (with the handle to resume, if any).
    pub session_resumption: Option<SessionResumptionConfig>,
    /// Context window compression, passed through as JSON.
    pub context_window_compression: Option<Value>,
    /// Proactivity, passed through as JSON.
    pub proactivity: Option<Value>,
    /// Affective dialog.
    pub enable_affective_dialog: Option<bool>,
    /// Conversation history to replay at connect (audio already filtered out).
    pub history: Vec<Content>,
}

impl LiveConnectConfig {
    /// The modality the model should answer in (AUDIO unless TEXT is the only one asked for).
    pub fn modality(&self) -> Modality {
        if self.response_modalities.first() == Some(&Modality::Text) {
            Modality::Text
        } else {
            Modality::Audio
        }
    }
}

/// One input sent to a live model.
#[derive(Debug, Clone, PartialEq)]
pub enum LiveInput {
    /// Realtime media: an audio chunk or an image frame.
    Realtime(Blob),
    /// A client content turn; `turn_complete` false for partial updates.
    Content {
        /// The content (role `user`).
        content: Content,
        /// Whether the model should answer now.
        turn_complete: bool,
    },
    /// Results of function calls.
    ToolResponse(Vec<FunctionResponse>),
    /// Manual voice activity start.
    ActivityStart,
    /// Manual voice activity end.
    ActivityEnd,
    /// The audio stream paused (microphone muted): flush cached audio.
    AudioStreamEnd,
}

impl LiveInput {
    /// Realtime PCM16 audio at `rate` Hz.
    pub fn audio(data: Bytes, rate: u32) -> Self {
        LiveInput::Realtime(Blob::new(data, format!("audio/pcm;rate={rate}")))
    }
}
