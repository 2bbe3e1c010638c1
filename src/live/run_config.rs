//! `RunConfig`: how a live run behaves, with ADK's defaults.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use crate::lock::Recover;
use crate::model::{
    ContextWindowCompression, Modality, ProactivityConfig, RealtimeInputConfig,
    SessionResumptionConfig, SpeechConfig,
};

/// Settings of one run (ADK's `RunConfig`).
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// Response modalities; `None` means AUDIO in live runs.
    pub response_modalities: Option<Vec<Modality>>,
    /// Voice and language.
    pub speech_config: Option<SpeechConfig>,
    /// Transcribe the user's audio (on by default, as in ADK).
    pub input_audio_transcription: bool,
    /// Transcribe the model's audio (on by default, as in ADK).
    pub output_audio_transcription: bool,
    /// Voice activity detection settings.
    pub realtime_input_config: Option<RealtimeInputConfig>,
    /// Session resumption (handle, transparent).
    pub session_resumption: Option<SessionResumptionConfig>,
    /// Context window compression.
    pub context_window_compression: Option<ContextWindowCompression>,
    /// Proactive audio.
    pub proactivity: Option<ProactivityConfig>,
    /// Affective dialog.
    pub enable_affective_dialog: Option<bool>,
    /// Record input and output audio to artifacts.
    pub save_live_blob: bool,
    /// Limit on model calls (not enforced in live runs, as in ADK).
    pub max_llm_calls: u32,
    /// Metadata merged into every yielded event's `customMetadata`.
    pub custom_metadata: Option<Map<String, Value>>,
    /// Told each time the run connects to the model again (livegate's, for metrics).
    pub on_reconnect: OnReconnect,
    /// What the listener has heard of the current answer, where the transport knows (a phone
    /// call's mark acknowledgements): an interrupted answer is cut there (livegate's).
    pub playout: Option<crate::model::Playout>,
    /// What the run allows the model server: reconnects, answer time, bytes per turn
    /// (livegate's).
    pub limits: crate::live::flow::FlowLimits,
    /// The run's audio each way, for its usage totals (livegate's; a fresh one per run).
    pub audio: AudioTally,
    /// The verified claims of the client token the run was started with, if any: tools that
    /// forward the caller's identity pass them on (livegate's).
    pub caller_claims: Option<Arc<Map<String, Value>>>,
}

/// Seconds of PCM audio a run took from the client and had from the model, counted in
/// microseconds by whoever sees it pass (the send loop, the flow).
///
/// It only observes, so two configs that differ in it alone compare equal.
#[derive(Debug, Clone, Default)]
pub struct AudioTally(Arc<Tally>);

#[derive(Debug, Default)]
struct Tally {
    /// Microseconds in, then out.
    micros: [AtomicU64; 2],
    /// The client's last mime type and the rate it gives its audio (`None`: not PCM): a client
    /// sends the same type with every microphone frame, so it is parsed when it changes, not
    /// per frame.
    input_type: Mutex<(String, Option<u32>)>,
}

impl AudioTally {
    /// Audio from the client to the model.
    pub fn input(&self, blob: &crate::event::Blob) {
        let rate = {
            let mut last = self.0.input_type.lock_or_recover();
            if last.0 != blob.mime_type {
                *last = (blob.mime_type.clone(), pcm_rate(blob, 16_000));
            }
            last.1
        };
        self.add(0, blob, rate);
    }

    /// Audio from the model.
    pub fn output(&self, blob: &crate::event::Blob) {
        self.add(1, blob, pcm_rate(blob, 24_000));
    }

    fn add(&self, side: usize, blob: &crate::event::Blob, rate: Option<u32>) {
        let Some(rate) = rate else {
            return;
        };
        // PCM16 mono: two bytes a sample.
        let micros = blob.data.len() as u64 * 1_000_000 / (2 * u64::from(rate));
        self.0.micros[side].fetch_add(micros, Ordering::Relaxed);
    }

    /// Seconds in and out so far.
    pub fn seconds(&self) -> (f64, f64) {
        let read = |i: usize| self.0.micros[i].load(Ordering::Relaxed) as f64 / 1e6;
        (read(0), read(1))
    }
}

/// The sample rate of PCM audio (`default` where the type names none), `None` for anything else.
fn pcm_rate(blob: &crate::event::Blob, default: u32) -> Option<u32> {
    blob.is_pcm()
        .then(|| blob.sample_rate().unwrap_or(default).max(1))
}

impl PartialEq for AudioTally {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// A callback for a run's upstream reconnects; none by default.
///
/// It only observes, so two configs that differ in it alone compare equal.
#[derive(Clone, Default)]
pub struct OnReconnect(Option<Arc<dyn Fn() + Send + Sync>>);

impl OnReconnect {
    /// Calls `f` at each reconnect.
    pub fn new(f: impl Fn() + Send + Sync + 'static) -> Self {
        OnReconnect(Some(Arc::new(f)))
    }

    /// Reports a reconnect.
    pub(crate) fn reconnected(&self) {
        if let Some(f) = &self.0 {
            f();
        }
    }
}

impl std::fmt::Debug for OnReconnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "OnReconnect(set)"
        } else {
            "OnReconnect(none)"
        })
    }
}

impl PartialEq for OnReconnect {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            response_modalities: None,
            speech_config: None,
            input_audio_transcription: true,
            output_audio_transcription: true,
            realtime_input_config: None,
            session_resumption: None,
            context_window_compression: None,
            proactivity: None,
            enable_affective_dialog: None,
            save_live_blob: false,
            max_llm_calls: 500,
            custom_metadata: None,
            on_reconnect: OnReconnect::default(),
            playout: None,
            limits: crate::live::flow::FlowLimits::default(),
            audio: AudioTally::default(),
            caller_claims: None,
        }
    }
}

impl RunConfig {
    /// The modalities a live run uses: the configured ones, or AUDIO.
    pub fn live_modalities(&self) -> Vec<Modality> {
        self.response_modalities
            .clone()
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| vec![Modality::Audio])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Blob;

    #[test]
    fn each_frame_counts_at_the_rate_its_own_type_names() {
        let tally = AudioTally::default();
        let second = |rate: usize, mime: &str| Blob::new(vec![0u8; 2 * rate].into(), mime);
        tally.input(&second(16_000, "audio/pcm;rate=16000"));
        tally.input(&second(8_000, "audio/pcm;rate=8000"));
        tally.input(&second(8_000, "audio/pcm;rate=8000"));
        tally.input(&Blob::new(vec![0u8; 32_000].into(), "image/jpeg"));
        tally.input(&second(16_000, "audio/pcm"));
        tally.output(&second(24_000, "audio/pcm"));
        assert_eq!(tally.seconds(), (4.0, 1.0));
    }
}
