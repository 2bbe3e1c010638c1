//! Settings of the `sim` model: pacing, reply delay, chunking and voice activity detection.

use std::time::Duration;

/// How the sim paces the messages of an answer; also the `--sim-pacing` value, so the programs
/// that offer the flag (the gateway, the mock servers) parse into this one type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Pacing {
    /// Like a speaking voice: each audio chunk when its playback would start, text fragments a
    /// little apart. Answers take as long as they sound, so barge-in can cut them.
    #[default]
    #[value(name = "realtime", help = "Audio at the speed of speech")]
    RealTime,
    /// As fast as the flow takes them, like Gemini, which generates faster than real time.
    #[value(help = "As fast as possible, like Gemini")]
    Burst,
}

/// Settings of the `sim` model; `Default` behaves like a live model heard through a real client.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimConfig {
    /// Answer pacing (default `RealTime`).
    pub pacing: Pacing,
    /// Time from the end of the user's turn to the first message of the answer (default 150 ms).
    pub reply_delay: Duration,
    /// Length of each output audio chunk in milliseconds (default 40; clamped to 10..=1000).
    pub chunk_ms: u32,
    /// Words per text fragment in TEXT modality (default 3).
    pub text_chunk_words: u32,
    /// Time between text fragments with `RealTime` pacing, in milliseconds (default 30).
    pub text_chunk_interval_ms: u32,
    /// Frame level (RMS, dBFS) at or above which input audio counts as speech (default -40).
    pub vad_threshold_dbfs: f32,
    /// Speech needed before an utterance starts (and can interrupt), in milliseconds (default 100).
    pub vad_min_speech_ms: u32,
    /// Silence that ends an utterance, in milliseconds (default 500).
    pub vad_silence_ms: u32,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            pacing: Pacing::RealTime,
            reply_delay: Duration::from_millis(150),
            chunk_ms: 40,
            text_chunk_words: 3,
            text_chunk_interval_ms: 30,
            vad_threshold_dbfs: -40.0,
            vad_min_speech_ms: 100,
            vad_silence_ms: 500,
        }
    }
}

impl SimConfig {
    /// The settings the `--sim-*` options give: `pacing`, and the reply delay and chunk length
    /// when set (else the defaults).
    pub fn from_options(
        pacing: Pacing,
        reply_delay_ms: Option<u64>,
        chunk_ms: Option<u32>,
    ) -> Self {
        let mut sim = SimConfig {
            pacing,
            ..SimConfig::default()
        };
        if let Some(ms) = reply_delay_ms {
            sim.reply_delay = Duration::from_millis(ms);
        }
        if let Some(ms) = chunk_ms {
            sim.chunk_ms = ms;
        }
        sim
    }

    /// Burst pacing and no reply delay: answers as fast as possible (handy for tests).
    pub fn instant() -> Self {
        SimConfig {
            pacing: Pacing::Burst,
            reply_delay: Duration::ZERO,
            ..SimConfig::default()
        }
    }

    /// From the end of the user's speech to the answer's first message: the silence that ends
    /// an utterance, then the reply delay. (What a load test should not count as the gateway's.)
    pub fn answer_delay(&self) -> Duration {
        Duration::from_millis(u64::from(self.vad_silence_ms)) + self.reply_delay()
    }

    /// The reply delay, capped so that adding it to an instant cannot overflow.
    pub(super) fn reply_delay(&self) -> Duration {
        self.reply_delay.min(Duration::from_secs(3600))
    }

    /// Output audio chunk length in milliseconds, within sane bounds.
    pub(super) fn chunk_ms(&self) -> u32 {
        self.chunk_ms.clamp(10, 1000)
    }

    /// Words per text fragment, at least one.
    pub(super) fn text_chunk_words(&self) -> usize {
        self.text_chunk_words.max(1) as usize
    }

    /// Time between text fragments.
    pub(super) fn text_chunk_interval(&self) -> Duration {
        Duration::from_millis(u64::from(self.text_chunk_interval_ms.min(10_000)))
    }

    /// The VAD threshold in dBFS, falling back to the default when it is not a usable number.
    pub(super) fn vad_threshold_dbfs(&self) -> f32 {
        if self.vad_threshold_dbfs.is_finite() {
            self.vad_threshold_dbfs.clamp(-120.0, 0.0)
        } else {
            SimConfig::default().vad_threshold_dbfs
        }
    }
}
