//! Errors a live model connection can report.

/// What went wrong talking to a model.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ModelError {
    /// No backend serves this model name.
    #[error(
        "unknown model {0:?}: use sim, a Gemini Live model id (gemini-…, e.g. \
         gemini-2.5-flash-native-audio-preview-12-2025) or an OpenAI Realtime model (openai:…, \
         gpt-realtime…, gpt-4o-realtime…, gpt-4o-mini-realtime…)"
    )]
    UnknownModel(String),
    /// The connection could not be opened.
    #[error("could not connect to the model: {0}")]
    Connect(String),
    /// The upstream closed the session with a close code.
    #[error("model closed the connection (code {code}): {reason}")]
    Closed {
        /// WebSocket close code (1000 normal, 1007 invalid argument, 1008 policy, 1011 internal).
        code: u16,
        /// Close reason given by the upstream.
        reason: String,
    },
    /// The upstream sent something we could not understand.
    #[error("model protocol error: {0}")]
    Protocol(String),
    /// The connection is gone (the backend task ended).
    #[error("model connection is closed")]
    Gone,
    /// The model did not begin to answer a turn in time (a server that keeps the connection
    /// alive but never answers).
    #[error("the model did not begin to answer within {0:?}")]
    NoAnswer(std::time::Duration),
}

impl ModelError {
    /// A WebSocket close frame from the model as an error (a missing frame reads as 1006, as the
    /// SDKs do).
    pub(crate) fn closed(
        frame: Option<&tokio_tungstenite::tungstenite::protocol::CloseFrame>,
    ) -> Self {
        match frame {
            Some(frame) => ModelError::Closed {
                code: u16::from(frame.code),
                reason: frame.reason.to_string(),
            },
            None => ModelError::Closed {
                code: 1006,
                reason: "closed without a close frame".into(),
            },
        }
    }

    /// ADK-style error code, usable as a metric label and as an event's `errorCode`.
    pub fn code(&self) -> &'static str {
        match self {
            ModelError::UnknownModel(_) => "NOT_FOUND",
            ModelError::Connect(_) => "UNAVAILABLE",
            ModelError::Closed { code, .. } => match code {
                1007 => "INVALID_ARGUMENT",
                1008 => "PERMISSION_DENIED",
                1011 => "INTERNAL",
                _ => "UNAVAILABLE",
            },
            ModelError::Protocol(_) => "INTERNAL",
            ModelError::Gone => "UNAVAILABLE",
            ModelError::NoAnswer(_) => "DEADLINE_EXCEEDED",
        }
    }

    /// True if a reconnect with a resumption handle may recover (ADK: 1000, 1006, 1011, drops).
    pub fn is_resumable(&self) -> bool {
        matches!(
            self,
            ModelError::Closed {
                code: 1000 | 1006 | 1011,
                ..
            } | ModelError::Gone
                | ModelError::NoAnswer(_)
        )
    }
}
