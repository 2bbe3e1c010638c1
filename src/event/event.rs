//! The ADK `Event`: an `LlmResponse`'s fields plus id, invocation id, author, actions and timestamp.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Content;

/// One event of a run, as ADK yields and persists it.
///
/// Field order follows ADK's (the `LlmResponse` fields, then the `Event` fields) so the JSON reads
/// the same as ADK's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// The model that produced this response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<String>,
    /// Text, audio, function calls or responses, file references.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Content>,
    /// Grounding metadata, passed through as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grounding_metadata: Option<Value>,
    /// True for streamed fragments that a non-partial event will follow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<bool>,
    /// The model finished its turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_complete: Option<bool>,
    /// Why the turn completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_complete_reason: Option<String>,
    /// Why generation finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Error code (e.g. `INVALID_ARGUMENT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    /// Human-readable error message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// The model's answer was interrupted (barge-in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<bool>,
    /// Caller-supplied metadata (RunConfig `custom_metadata`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_metadata: Option<Map<String, Value>>,
    /// Token usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_metadata: Option<UsageMetadata>,
    /// A new session resumption handle from the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_session_resumption_update: Option<SessionResumptionUpdate>,
    /// The upstream live session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_session_id: Option<String>,
    /// Transcription of the user's audio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_transcription: Option<Transcription>,
    /// Transcription of the model's audio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_transcription: Option<Transcription>,
    /// The run this event belongs to (`e-` + UUID).
    #[serde(default)]
    pub invocation_id: String,
    /// The agent's name, or `user`.
    #[serde(default)]
    pub author: String,
    /// Side effects: state and artifact deltas, transfers.
    #[serde(default)]
    pub actions: EventActions,
    /// ADK 2.x workflow node info; always `{"path":""}` for agents.
    #[serde(default)]
    pub node_info: NodeInfo,
    /// Ids of long-running function calls in this event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_running_tool_ids: Option<Vec<String>>,
    /// Agent branch (`parent.child`), for multi-agent runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Unique event id (UUID).
    #[serde(default)]
    pub id: String,
    /// Seconds since the epoch.
    #[serde(default)]
    pub timestamp: f64,
}

impl Event {
    /// A fresh event with a new id and the current time.
    pub fn new(invocation_id: &str, author: &str) -> Self {
        Event {
            invocation_id: invocation_id.to_owned(),
            author: author.to_owned(),
            id: new_event_id(),
            timestamp: now_timestamp(),
            ..Event::default()
        }
    }

    /// An error event with an ADK-style code and message.
    pub fn error(
        invocation_id: &str,
        author: &str,
        code: &str,
        message: impl Into<String>,
    ) -> Self {
        Event {
            error_code: Some(code.to_owned()),
            error_message: Some(message.into()),
            ..Event::new(invocation_id, author)
        }
    }

    /// True for streamed fragments (`partial: true`).
    pub fn is_partial(&self) -> bool {
        self.partial == Some(true)
    }

    /// The function calls in this event's content.
    pub fn function_calls(&self) -> Vec<&super::FunctionCall> {
        self.parts()
            .filter_map(|p| p.function_call.as_ref())
            .collect()
    }

    /// The function responses in this event's content.
    pub fn function_responses(&self) -> Vec<&super::FunctionResponse> {
        self.parts()
            .filter_map(|p| p.function_response.as_ref())
            .collect()
    }

    /// ADK's `is_final_response()`: the last event of an agent's answer for display.
    pub fn is_final_response(&self) -> bool {
        if self.actions.skip_summarization == Some(true)
            || self
                .long_running_tool_ids
                .as_ref()
                .is_some_and(|ids| !ids.is_empty())
        {
            return true;
        }
        self.function_calls().is_empty()
            && self.function_responses().is_empty()
            && !self.is_partial()
    }

    /// True if the event changes something: state, artifacts, or who runs next.
    pub fn actions_changed(&self) -> bool {
        !self.actions.state_delta.is_empty()
            || !self.actions.artifact_delta.is_empty()
            || self.actions.transfer_to_agent.is_some()
    }

    /// True if the content carries inline audio/video/image (never persisted in live mode).
    pub fn has_inline_media(&self) -> bool {
        self.content.as_ref().is_some_and(Content::has_inline_media)
    }

    /// ADK's live persistence rule: not partial and no inline media.
    pub fn is_persisted_in_live(&self) -> bool {
        !self.is_partial() && !self.has_inline_media()
    }

    fn parts(&self) -> impl Iterator<Item = &super::Part> {
        self.content.iter().flat_map(|c| c.parts.iter())
    }
}

/// Side effects of an event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventActions {
    /// Don't summarize a function response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_summarization: Option<bool>,
    /// Session state changes.
    #[serde(default)]
    pub state_delta: Map<String, Value>,
    /// Artifacts saved: name → version.
    #[serde(default)]
    pub artifact_delta: Map<String, Value>,
    /// Hand the conversation to another agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_to_agent: Option<String>,
    /// Escalate to the parent agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalate: Option<bool>,
    /// Auth configs requested by tools.
    #[serde(default)]
    pub requested_auth_configs: Map<String, Value>,
    /// Tool confirmations requested by tools.
    #[serde(default)]
    pub requested_tool_confirmations: Map<String, Value>,
}

/// ADK 2.x's workflow node info.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Node path; empty for agents.
    #[serde(default)]
    pub path: String,
}

/// A transcription fragment (`finished: false`) or the full text (`finished: true`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transcription {
    /// The text: a fragment, or the whole utterance when finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Whether this is the finished utterance. Always written, as ADK does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<bool>,
}

impl Transcription {
    /// A transcription with text and its finished flag.
    pub fn new(text: impl Into<String>, finished: bool) -> Self {
        Transcription {
            text: Some(text.into()),
            finished: Some(finished),
        }
    }
}

/// Token counts with ADK's (generate-content) field names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageMetadata {
    /// Tokens in the response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates_token_count: Option<u64>,
    /// Response tokens by modality.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidates_tokens_details: Option<Vec<ModalityTokenCount>>,
    /// Tokens in the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_token_count: Option<u64>,
    /// Prompt tokens by modality.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<Vec<ModalityTokenCount>>,
    /// Total tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_token_count: Option<u64>,
}

/// Token count for one modality.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModalityTokenCount {
    /// `TEXT`, `AUDIO`, …
    pub modality: String,
    /// Tokens of that modality.
    pub token_count: u64,
}

/// A session resumption update from the model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionResumptionUpdate {
    /// The handle to resume with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_handle: Option<String>,
    /// Whether the session can be resumed at this point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumable: Option<bool>,
}

/// A new event id (UUID v4).
pub fn new_event_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A new invocation id (`e-` + UUID v4).
pub fn new_invocation_id() -> String {
    format!("e-{}", uuid::Uuid::new_v4())
}

/// The current time in float seconds since the epoch.
pub fn now_timestamp() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Blob, Part};
    use bytes::Bytes;

    fn fixed(mut e: Event) -> Event {
        e.invocation_id = "e-1".into();
        e.id = "id-1".into();
        e.timestamp = 1760000000.5;
        e
    }

    #[test]
    fn turn_complete_json_matches_adk() {
        let e = fixed(Event {
            turn_complete: Some(true),
            ..Event::new("", "agent")
        });
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"turnComplete":true,"invocationId":"e-1","author":"agent","actions":{"stateDelta":{},"artifactDelta":{},"requestedAuthConfigs":{},"requestedToolConfirmations":{}},"nodeInfo":{"path":""},"id":"id-1","timestamp":1760000000.5}"#
        );
    }

    #[test]
    fn transcription_and_audio_json_match_adk() {
        let e = fixed(Event {
            partial: Some(true),
            input_transcription: Some(Transcription::new("What's the", false)),
            ..Event::new("", "user")
        });
        let json = serde_json::to_string(&e).unwrap();
        assert!(json.starts_with(
            r#"{"partial":true,"inputTranscription":{"text":"What's the","finished":false},"invocationId""#
        ));
        let audio = fixed(Event {
            content: Some(Content::blob(
                "model",
                Blob::new(
                    Bytes::from_static(&[1, 0, 2, 0, 3, 0]),
                    "audio/pcm;rate=24000",
                ),
            )),
            ..Event::new("", "agent")
        });
        let json = serde_json::to_string(&audio).unwrap();
        assert!(json.starts_with(
            r#"{"content":{"parts":[{"inlineData":{"data":"AQACAAMA","mimeType":"audio/pcm;rate=24000"}}],"role":"model"},"#
        ));
        assert!(audio.has_inline_media() && !audio.is_persisted_in_live());
    }

    #[test]
    fn round_trips_and_accepts_snake_free_partial_input() {
        let e = fixed(Event {
            content: Some(Content {
                parts: vec![Part::text("hi")],
                role: Some("model".into()),
            }),
            partial: Some(false),
            interrupted: Some(false),
            ..Event::new("", "agent")
        });
        let json = serde_json::to_string(&e).unwrap();
        let back: Event = serde_json::from_str(&json).unwrap();
        assert_eq!(back, e);
        assert!(back.is_final_response());
        let minimal: Event = serde_json::from_str(r#"{"author":"x","unknownKey":1}"#).unwrap();
        assert_eq!(minimal.author, "x");
    }
}
