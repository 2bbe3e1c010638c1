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
pub mod sim;
pub mod tls;
mod upstream;

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::mpsc;

pub use chunker::{DEFAULT_AUDIO_CHUNK, MAX_AUDIO_CHUNK};
pub use config::{
    ActivityHandling, AutomaticActivityDetection, ContextWindowCompression, EndSensitivity,
    FunctionDeclaration, LiveConnectConfig, LiveInput, Modality, ProactivityConfig,
    RealtimeInputConfig, SessionResumptionConfig, SlidingWindow, SpeechConfig, StartSensitivity,
};
pub use error::ModelError;
pub use playout::Playout;
pub use response::{GoAway, LlmRequest, LlmResponse};

/// One message from a model connection: a response, or why the connection failed. Boxed because
/// a channel allocates room for 32 messages up front, and most connections are idle.
pub type ModelMessage = Result<Box<LlmResponse>, ModelError>;

/// Capacity of the channels between a flow and a backend connection.
pub const CONNECTION_CHANNEL_CAPACITY: usize = 256;

/// An open live session with a model: send inputs, receive responses.
///
/// Dropping `sender` closes the upstream session; the backend then ends `receiver`.
#[derive(Debug)]
pub struct LiveConnection {
    /// Inputs to the model (audio, content, tool responses, activity signals).
    pub sender: mpsc::Sender<LiveInput>,
    /// Responses from the model, one per server message; `None` when the session has ended.
    pub receiver: mpsc::Receiver<ModelMessage>,
}

/// A live model that can open streaming sessions.
#[async_trait]
pub trait LiveModel: Send + Sync + std::fmt::Debug {
    /// The model name, as written in `modelVersion`.
    fn name(&self) -> &str;

    /// Opens a live session configured by `config`.
    async fn connect(&self, config: LiveConnectConfig) -> Result<LiveConnection, ModelError>;
}

/// Options that pick and configure a backend by model name.
#[derive(Debug, Clone, Default)]
pub struct ModelOptions {
    /// Settings of the `sim` backend.
    pub sim: sim::SimConfig,
    /// How to reach Gemini.
    pub gemini: gemini::GeminiOptions,
    /// How to reach OpenAI Realtime.
    pub openai: openai::OpenAiOptions,
}

/// Resolves a model name (`sim`, a Gemini live model id, or an OpenAI realtime model id or
/// `openai:<id>`) to a backend.
pub fn model_for_name(
    name: &str,
    options: &ModelOptions,
) -> Result<Arc<dyn LiveModel>, ModelError> {
    match name {
        "sim" | "" => Ok(Arc::new(sim::SimModel::new(options.sim))),
        id if gemini::is_gemini_model(id) => Ok(Arc::new(gemini::GeminiModel::new(
            id,
            options.gemini.clone(),
        ))),
        id if openai::is_openai_model(id) => Ok(Arc::new(openai::OpenAiModel::new(
            id,
            options.openai.clone(),
        )?)),
        other => Err(ModelError::UnknownModel(other.to_owned())),
    }
}
