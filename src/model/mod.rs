//! Live model backends: the `LiveModel` / `LiveConnection` contract and its implementations.
//!
//! A backend turns a `LiveConnectConfig` into a `LiveConnection`: a pair of bounded channels owned by
//! the backend's own task(s). The flow above sends `LiveInput`s and receives `LlmResponse`s, one per
//! upstream server message, without knowing which model sits behind them.

mod chunker;
mod config;
mod error;
pub mod gemini;
pub mod openai;
mod playout;
mod response;
pub mod schema;
mod select;
pub mod sim;
pub mod tls;
mod upstream;

use async_trait::async_trait;
use tokio::sync::mpsc;

use crate::byte_channel;

pub use chunker::{DEFAULT_AUDIO_CHUNK, MAX_AUDIO_CHUNK};
pub use config::{
    ActivityHandling, AutomaticActivityDetection, Behavior, ContextWindowCompression,
    EndSensitivity, FunctionDeclaration, LiveConnectConfig, LiveInput, Modality, ProactivityConfig,
    RealtimeInputConfig, SessionResumptionConfig, SlidingWindow, SpeechConfig, StartSensitivity,
    UnknownModality,
};
pub use error::ModelError;
pub use playout::Playout;
pub use response::{GoAway, LlmRequest, LlmResponse};
pub use select::{missing_credentials, model_for_name, ModelOptions};

/// One message from a model connection: a response, or why the connection failed. Boxed because
/// a channel allocates room for 32 messages up front, and most connections are idle.
pub type ModelMessage = Result<Box<LlmResponse>, ModelError>;

/// Capacity of the channels between a flow and a backend connection.
pub const CONNECTION_CHANNEL_CAPACITY: usize = 256;

/// Bytes of media and text a model connection's input may hold: with the live request queue's
/// own bound, what a connection holds on its way to a slow model stays a few MiB however large
/// its messages.
pub const MAX_INPUT_BYTES: usize = 2 * 1024 * 1024;

/// The sending side of a model connection's input.
pub type InputSender = byte_channel::Sender<LiveInput>;
/// The receiving side of a model connection's input, read by the backend.
pub type InputReceiver = byte_channel::Receiver<LiveInput>;

/// A model connection's input channel, bounded in messages and bytes.
pub fn input_channel() -> (InputSender, InputReceiver) {
    byte_channel::channel(CONNECTION_CHANNEL_CAPACITY, MAX_INPUT_BYTES)
}

/// An open live session with a model: send inputs, receive responses.
///
/// Dropping `sender` closes the upstream session; the backend then ends `receiver`.
#[derive(Debug)]
pub struct LiveConnection {
    /// Inputs to the model (audio, content, tool responses, activity signals).
    pub sender: InputSender,
    /// Responses from the model, one per server message; `None` when the session has ended.
    pub receiver: mpsc::Receiver<ModelMessage>,
}

/// A live model that can open streaming sessions.
#[async_trait]
pub trait LiveModel: Send + Sync + std::fmt::Debug {
    /// The model name, as written in `modelVersion`.
    fn name(&self) -> &str;

    /// Who serves the model, for clients that offer its voices.
    fn provider(&self) -> Provider {
        Provider::Other
    }

    /// Opens a live session configured by `config`.
    async fn connect(&self, config: LiveConnectConfig) -> Result<LiveConnection, ModelError>;
}

/// Who serves a live model; clients offer the voice names it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// The embedded `sim` (any voice name is a pitch of its own; Gemini's names are offered).
    Sim,
    /// Gemini Live.
    Gemini,
    /// OpenAI Realtime.
    OpenAi,
    /// Another backend (a test's, a library user's).
    Other,
}

impl Provider {
    /// Its name on the wire: `sim`, `gemini`, `openai` or `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Sim => "sim",
            Provider::Gemini => "gemini",
            Provider::OpenAi => "openai",
            Provider::Other => "other",
        }
    }
}
