//! `sim`: the embedded, deterministic, offline live model.
//!
//! It behaves like Gemini Live so the gateway works with no key and no network:
//! - **Text in** (a complete content turn) ⇒ after the reply delay, `Hello! I'm the livegate
//!   simulator. You said: "…".` streamed as text fragments (TEXT modality), or as output
//!   transcription words plus synthesized 24 kHz speech (AUDIO modality); then usage metadata,
//!   `generationComplete` and `turnComplete`. Content sent without `turnComplete` joins the next turn.
//! - **Audio in** (PCM16, `rate=` read from the mime type) ⇒ an energy VAD finds utterances (or
//!   `activityStart`/`activityEnd` delimit them when automatic detection is off; `audioStreamEnd`
//!   flushes one). Each is transcribed as `[speech 2.86 s]` and answered with a **voice echo**: the
//!   utterance itself resampled to 24 kHz, exactly 1.5× its 16 kHz sample count, with the output
//!   transcription `You said something for 2.9 seconds.` spread over it.
//! - **Barge-in**: speech (or a new text turn) while an answer is being sent ⇒ `interrupted`, then
//!   `turnComplete` with the usage of what was generated (as Gemini ends it), and no more of that
//!   answer. With `Pacing::Burst` answers are usually out before anyone can interrupt.
//! - **Tools**: a turn naming a declared tool ⇒ a `toolCall`; the answer reads the responses.
//!   Speech or a new text turn while responses are still awaited ⇒ `toolCallCancellation` with
//!   the unanswered calls' ids (as Gemini voids them), and their late responses are ignored.
//! - **Resumption**: with `session_resumption` set, a `sim-{uuid}-{n}` handle after each turn.
//!
//! One tokio task per connection owns all state; answers are rendered chunk by chunk as they are
//! sent, and input audio is kept as shared slices, so thousands of sessions stay cheap.

mod answer;
mod config;
pub mod intents;
pub mod pcm;
mod replies;
mod session;
pub mod vad;
pub mod voice;

use async_trait::async_trait;
use tokio::sync::mpsc;

pub use config::{Pacing, SimConfig};
pub use replies::{plan_reply, speech_reply, speech_transcript, text_reply, Heard, Reply};
pub use session::knows_handle;
pub use voice::{echo_len, OUTPUT_MIME, OUTPUT_RATE};

use super::{
    LiveConnectConfig, LiveConnection, LiveModel, ModelError, CONNECTION_CHANNEL_CAPACITY,
};

/// The embedded simulated live model.
#[derive(Debug, Clone, Default)]
pub struct SimModel {
    config: SimConfig,
}

impl SimModel {
    /// A sim model with these settings.
    pub fn new(config: SimConfig) -> Self {
        SimModel { config }
    }

    /// The model's settings.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }
}

#[async_trait]
impl LiveModel for SimModel {
    fn name(&self) -> &str {
        "sim"
    }

    fn provider(&self) -> super::Provider {
        super::Provider::Sim
    }

    async fn connect(&self, config: LiveConnectConfig) -> Result<LiveConnection, ModelError> {
        if let Some(handle) = config
            .session_resumption
            .as_ref()
            .and_then(|r| r.handle.as_deref())
        {
            if !session::knows_handle(handle) {
                // As Gemini refuses a handle it does not know (or no longer keeps).
                return Err(ModelError::Closed {
                    code: 1007,
                    reason: "invalid session resumption handle".into(),
                });
            }
        }
        let (sender, inputs) = crate::model::input_channel();
        let (outputs, receiver) = mpsc::channel(CONNECTION_CHANNEL_CAPACITY);
        tokio::spawn(session::run(self.config, config, inputs, outputs));
        Ok(LiveConnection { sender, receiver })
    }
}

#[cfg(test)]
mod tests;
