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

/// A modality other than `AUDIO` or `TEXT` (as given, upper-cased).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown modality {0:?} (expected AUDIO or TEXT)")]
pub struct UnknownModality(pub String);

impl std::str::FromStr for Modality {
    type Err = UnknownModality;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_uppercase().as_str() {
            "AUDIO" => Ok(Modality::Audio),
            "TEXT" => Ok(Modality::Text),
            other => Err(UnknownModality(other.to_owned())),
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
    /// Whether the model waits for the call's result (Gemini's `FunctionDeclaration.behavior`);
    /// None is blocking, and is sent as nothing, as before tools had a behavior.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behavior: Option<Behavior>,
}

impl FunctionDeclaration {
    /// True when the model goes on while the call runs.
    pub fn is_non_blocking(&self) -> bool {
        self.behavior == Some(Behavior::NonBlocking)
    }
}

/// Whether the model waits for a tool's result before it goes on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Behavior {
    /// The model waits for the result (the default).
    #[default]
    Blocking,
    /// The model goes on talking; the result is given when the call ends, as its
    /// [`Scheduling`](crate::event::Scheduling) says.
    NonBlocking,
}

impl Behavior {
    /// Its name on Gemini's wire: `BLOCKING` or `NON_BLOCKING`.
    pub fn as_wire(self) -> &'static str {
        match self {
            Behavior::Blocking => "BLOCKING",
            Behavior::NonBlocking => "NON_BLOCKING",
        }
    }
}

/// Voice activity detection settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RealtimeInputConfig {
    /// Automatic (server-side) voice activity detection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automatic_activity_detection: Option<AutomaticActivityDetection>,
    /// What user activity does to a model answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity_handling: Option<ActivityHandling>,
}

impl RealtimeInputConfig {
    /// True when automatic voice activity detection is turned off (manual activity signals).
    pub fn automatic_detection_disabled(&self) -> bool {
        self.automatic_activity_detection
            .as_ref()
            .and_then(|a| a.disabled)
            .unwrap_or(false)
    }

    /// True unless user activity is set not to interrupt answers (barge-in is the default).
    pub fn activity_interrupts(&self) -> bool {
        self.activity_handling != Some(ActivityHandling::NoInterruption)
    }
}

/// What user activity does to an answer being given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ActivityHandling {
    /// The start of user activity interrupts the answer (barge-in; the default).
    StartOfActivityInterrupts,
    /// The answer goes on while the user speaks.
    NoInterruption,
    /// The model's default (interrupts), as clients may spell it.
    ActivityHandlingUnspecified,
}

/// How readily speech is detected to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StartSensitivity {
    /// Starts on quieter or shorter speech.
    #[serde(rename = "START_SENSITIVITY_HIGH")]
    High,
    /// Needs clearer speech to start.
    #[serde(rename = "START_SENSITIVITY_LOW")]
    Low,
    /// The model's default, as clients may spell it.
    #[serde(rename = "START_SENSITIVITY_UNSPECIFIED")]
    Unspecified,
}

/// How readily speech is detected to have ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndSensitivity {
    /// Ends on shorter pauses.
    #[serde(rename = "END_SENSITIVITY_HIGH")]
    High,
    /// Needs longer pauses to end.
    #[serde(rename = "END_SENSITIVITY_LOW")]
    Low,
    /// The model's default, as clients may spell it.
    #[serde(rename = "END_SENSITIVITY_UNSPECIFIED")]
    Unspecified,
}

/// Automatic voice activity detection settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AutomaticActivityDetection {
    /// Turn automatic detection off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    /// How readily speech starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_of_speech_sensitivity: Option<StartSensitivity>,
    /// How readily speech ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_of_speech_sensitivity: Option<EndSensitivity>,
    /// Speech required before a start is committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_padding_ms: Option<u32>,
    /// Silence required before an end is committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silence_duration_ms: Option<u32>,
}

/// Voice and language of spoken answers (`generationConfig.speechConfig`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "SpeechConfigWire", into = "SpeechConfigWire")]
pub struct SpeechConfig {
    /// A prebuilt voice (`Puck`, `Kore`, …).
    pub voice_name: Option<String>,
    /// The language spoken and heard, BCP-47 (`en-US`, `de-DE`).
    pub language_code: Option<String>,
}

/// `speechConfig` as Gemini spells it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpeechConfigWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    voice_config: Option<VoiceConfigWire>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    language_code: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct VoiceConfigWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prebuilt_voice_config: Option<PrebuiltVoiceWire>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PrebuiltVoiceWire {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    voice_name: Option<String>,
}

impl From<SpeechConfigWire> for SpeechConfig {
    fn from(wire: SpeechConfigWire) -> Self {
        SpeechConfig {
            voice_name: wire
                .voice_config
                .and_then(|v| v.prebuilt_voice_config)
                .and_then(|p| p.voice_name),
            language_code: wire.language_code,
        }
    }
}

impl From<SpeechConfig> for SpeechConfigWire {
    fn from(config: SpeechConfig) -> Self {
        SpeechConfigWire {
            voice_config: config.voice_name.map(|name| VoiceConfigWire {
                prebuilt_voice_config: Some(PrebuiltVoiceWire {
                    voice_name: Some(name),
                }),
            }),
            language_code: config.language_code,
        }
    }
}

/// Context window compression: past `trigger_tokens` the oldest turns are dropped down to the
/// sliding window's `target_tokens` (Gemini's defaults where unset). It lifts the session length
/// caps of audio sessions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextWindowCompression {
    /// Context size that starts a compression.
    #[serde(
        default,
        deserialize_with = "int64",
        skip_serializing_if = "Option::is_none"
    )]
    pub trigger_tokens: Option<u64>,
    /// The sliding window (the only compression mechanism).
    #[serde(default)]
    pub sliding_window: SlidingWindow,
}

/// The sliding window of context window compression.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SlidingWindow {
    /// Context size kept after a compression.
    #[serde(
        default,
        deserialize_with = "int64",
        skip_serializing_if = "Option::is_none"
    )]
    pub target_tokens: Option<u64>,
}

/// An int64 as proto3 JSON has it: a number or a decimal string.
fn int64<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    match Option::<Value>::deserialize(deserializer)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("{n} is not a token count"))),
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| serde::de::Error::custom(format!("{s:?} is not a token count"))),
        Some(other) => Err(serde::de::Error::custom(format!(
            "{other} is not a token count"
        ))),
    }
}

/// Proactive audio: the model may choose not to answer input that is not meant for it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProactivityConfig {
    /// Turn proactive audio on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proactive_audio: Option<bool>,
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
    /// Voice and language.
    pub speech_config: Option<SpeechConfig>,
    /// Transcribe the user's audio.
    pub input_audio_transcription: bool,
    /// Transcribe the model's audio.
    pub output_audio_transcription: bool,
    /// Voice activity detection settings.
    pub realtime_input_config: Option<RealtimeInputConfig>,
    /// Session resumption settings (with the handle to resume, if any).
    pub session_resumption: Option<SessionResumptionConfig>,
    /// Context window compression.
    pub context_window_compression: Option<ContextWindowCompression>,
    /// Proactivity.
    pub proactivity: Option<ProactivityConfig>,
    /// Affective dialog.
    pub enable_affective_dialog: Option<bool>,
    /// Conversation history to replay at connect (audio already filtered out).
    pub history: Vec<Content>,
    /// What the listener has heard of the current answer, where the transport knows.
    pub playout: Option<super::Playout>,
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

impl crate::byte_channel::Weigh for LiveInput {
    fn weight(&self) -> usize {
        match self {
            LiveInput::Realtime(blob) => blob.data.len(),
            LiveInput::Content { content, .. } => content
                .parts
                .iter()
                .map(|p| {
                    p.text.as_ref().map_or(0, String::len)
                        + p.inline_data.as_ref().map_or(0, |b| b.data.len())
                })
                .sum(),
            _ => 0,
        }
    }
}

impl LiveInput {
    /// Realtime PCM16 audio at `rate` Hz.
    pub fn audio(data: Bytes, rate: u32) -> Self {
        LiveInput::Realtime(Blob::new(data, format!("audio/pcm;rate={rate}")))
    }
}
