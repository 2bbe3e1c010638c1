//! `RunConfig`: how a live run behaves, with ADK's defaults.

use std::sync::Arc;

use serde_json::{Map, Value};

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
pub struct AudioTally(Arc<[std::sync::atomic::AtomicU64; 2]>);

impl AudioTally {
    /// Audio from the client to the model.
    pub fn input(&self, blob: &crate::event::Blob) {
        Self::add(&self.0[0], blob, 16_000);
    }

    /// Audio from the model.
    pub fn output(&self, blob: &crate::event::Blob) {
        Self::add(&self.0[1], blob, 24_000);
    }

    fn add(counter: &std::sync::atomic::AtomicU64, blob: &crate::event::Blob, default_rate: u32) {
        if !blob.is_pcm() {
            return;
        }
        let rate = u64::from(blob.sample_rate().unwrap_or(default_rate).max(1));
        // PCM16 mono: two bytes a sample.
        let micros = blob.data.len() as u64 * 1_000_000 / (2 * rate);
        counter.fetch_add(micros, std::sync::atomic::Ordering::Relaxed);
    }

    /// Seconds in and out so far.
    pub fn seconds(&self) -> (f64, f64) {
        let read = |i: usize| self.0[i].load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e6;
        (read(0), read(1))
    }
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
