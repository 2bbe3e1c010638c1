//! `LlmResponse`: one upstream server message, normalized across backends.

use crate::event::{Content, FunctionCall, SessionResumptionUpdate, Transcription, UsageMetadata};

/// One message from a live model. Several fields may be set at once, as in a Gemini
/// `serverContent`; the live flow splits them into ADK events in ADK's order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LlmResponse {
    /// Model turn parts: text fragments and/or inline audio chunks.
    pub content: Option<Content>,
    /// A fragment of the user's speech transcription (new text only).
    pub input_transcription: Option<Transcription>,
    /// A fragment of the model's speech transcription (new text only).
    pub output_transcription: Option<Transcription>,
    /// The model finished generating (audio may still be playing).
    pub generation_complete: bool,
    /// The model's turn is over.
    pub turn_complete: bool,
    /// The model's answer was cut off by user speech.
    pub interrupted: bool,
    /// Token usage, with ADK's field names.
    pub usage_metadata: Option<UsageMetadata>,
    /// Function calls the model wants executed.
    pub tool_calls: Vec<FunctionCall>,
    /// Ids of function calls the model cancelled.
    pub tool_call_cancellations: Vec<String>,
    /// A new resumption handle.
    pub session_resumption_update: Option<SessionResumptionUpdate>,
    /// The upstream will close soon; reconnect with the latest handle.
    pub go_away: Option<GoAway>,
    /// The model name, for `modelVersion`.
    pub model_version: Option<String>,
    /// An error the model reported without ending the session (ADK-style code).
    pub error_code: Option<String>,
    /// What the error was.
    pub error_message: Option<String>,
    /// Grounding metadata for the turn ending here, as ADK reports it on `turnComplete` (an
    /// empty object from Gemini 3.x live models when they sent none).
    pub grounding_metadata: Option<serde_json::Value>,
}

/// Notice that the upstream will close the session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GoAway {
    /// Time left before the close, as the upstream wrote it (e.g. `"10s"`).
    pub time_left: Option<String>,
}

/// What an agent asks of a model for one step (what before-model callbacks screen).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LlmRequest {
    /// Model id.
    pub model: String,
    /// System instruction.
    pub system_instruction: Option<String>,
    /// The conversation; in a live run, the one user message being sent.
    pub contents: Vec<Content>,
}

impl LlmResponse {
    /// A response that only carries content (what callbacks return to override the model).
    pub fn from_content(content: Content) -> Self {
        LlmResponse {
            content: Some(content),
            ..LlmResponse::default()
        }
    }

    /// A text answer from the model.
    pub fn text(text: impl Into<String>) -> Self {
        Self::from_content(Content::text("model", text))
    }
}
