//! `sim`: the embedded, deterministic, offline live model.
//!
//! Text in ⇒ a streamed text answer (TEXT) or output transcription plus 24 kHz speech (AUDIO).
//! Audio in ⇒ an energy VAD finds utterances; each is transcribed as `(speech, N.N s)` and answered
//! with a voice echo (the utterance itself at 24 kHz). Speech or text arriving while an answer is
//! being sent ⇒ `interrupted`, and the rest of that answer is dropped. Answers are paced like a
//! speaking voice (`RealTime`) or sent at once like Gemini (`Burst`), after a reply delay.

mod reply;
mod session;
mod vad;
mod voice;

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;

pub use reply::{reply_to_speech, reply_to_text};
pub use vad::{rms, Vad, VadConfig, VadEvent};
pub use voice::{resample_to_output, OUTPUT_RATE};

use super::{
    LiveConnectConfig, LiveConnection, LiveModel, ModelError, CONNECTION_CHANNEL_CAPACITY,
};

/// How the sim paces its answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pacing {
    /// Each message when a speaking voice would reach it.
    #[default]
    RealTime,
    /// Everything at once, faster than real time (like Gemini).
    Burst,
}

/// Settings of the `sim` model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimConfig {
    /// Answer pacing.
    pub pacing: Pacing,
    /// Delay before an answer starts.
    pub reply_delay: Duration,
    /// Length of each audio chunk sent.
    pub chunk: Duration,
    /// Voice activity detection settings.
    pub vad: VadConfig,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            pacing: Pacing::RealTime,
            reply_delay: Duration::from_millis(150),
            chunk: Duration::from_millis(40),
            vad: VadConfig {
                threshold: 0.01,
                min_speech_ms: 100,
                silence_ms: 500,
            },
        }
    }
}

impl SimConfig {
    /// Burst pacing and no reply delay: answers as fast as possible (handy for tests).
    pub fn instant() -> Self {
        SimConfig {
            pacing: Pacing::Burst,
            reply_delay: Duration::ZERO,
            ..SimConfig::default()
        }
    }
}

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
}

#[async_trait]
impl LiveModel for SimModel {
    fn name(&self) -> &str {
        "sim"
    }

    async fn connect(&self, config: LiveConnectConfig) -> Result<LiveConnection, ModelError> {
        let (sender, inputs) = mpsc::channel(CONNECTION_CHANNEL_CAPACITY);
        let (outputs, receiver) = mpsc::channel(CONNECTION_CHANNEL_CAPACITY);
        tokio::spawn(session::run(self.config, config, inputs, outputs));
        Ok(LiveConnection { sender, receiver })
    }
}

#[cfg(test)]
mod tests;
