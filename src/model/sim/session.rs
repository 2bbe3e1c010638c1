//! One sim connection: a single task that reads inputs, detects speech, and sends scheduled answers.

use std::collections::VecDeque;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::reply::{plan_answer, reply_to_speech, reply_to_text, AnswerStyle};
use super::vad::{Vad, VadEvent};
use super::voice::{from_bytes, resample_to_output};
use super::{Pacing, SimConfig};
use crate::event::SessionResumptionUpdate;
use crate::model::{LiveConnectConfig, LiveInput, LlmResponse, Modality, ModelError};

/// Sample rate assumed for audio whose mime type names none.
const DEFAULT_INPUT_RATE: u32 = 16_000;

/// The state of one simulated live session.
struct SimSession {
    config: SimConfig,
    connect: LiveConnectConfig,
    output: mpsc::Sender<Result<LlmResponse, ModelError>>,
    /// Scheduled messages of the answer being given.
    outbox: VecDeque<(Instant, LlmResponse)>,
    vad: Vad,
    vad_rate: u32,
    manual_activity: bool,
    in_activity: bool,
    context: String,
    turns: u64,
    handle_prefix: String,
}

/// Runs a sim connection until the flow drops its sender or its receiver.
pub(super) async fn run(
    config: SimConfig,
    connect: LiveConnectConfig,
    mut input: mpsc::Receiver<LiveInput>,
    output: mpsc::Sender<Result<LlmResponse, ModelError>>,
) {
    let manual_activity = connect
        .realtime_input_config
        .as_ref()
        .is_some_and(|r| r.automatic_detection_disabled());
    let mut session = SimSession {
        vad: Vad::new(config.vad, DEFAULT_INPUT_RATE),
        vad_rate: DEFAULT_INPUT_RATE,
        config,
        connect,
        output,
        outbox: VecDeque::new(),
        manual_activity,
        in_activity: false,
        context: String::new(),
        turns: 0,
        handle_prefix: format!("sim-{}", uuid::Uuid::new_v4()),
    };
    loop {
        let due = session.outbox.front().map(|(at, _)| *at);
        tokio::select! {
            biased;
            received = input.recv() => match received {
                Some(item) => {
                    if !session.handle(item).await {
                        return;
                    }
                }
                None => return,
            },
            _ = sleep_until(due), if due.is_some() => {
                if !session.send_due().await {
                    return;
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

impl SimSession {
    /// Handles one input; false when the flow is gone.
    async fn handle(&mut self, input: LiveInput) -> bool {
        match input {
            LiveInput::Content {
                content,
                turn_complete,
            } => {
                let text = content.joined_text();
                if !self.context.is_empty() && !text.is_empty() {
                    self.context.push(' ');
                }
                self.context.push_str(&text);
                if turn_complete {
                    if !self.interrupt().await {
                        return false;
                    }
                    let heard = std::mem::take(&mut self.context);
                    let prompt = heard.split_whitespace().count() as u64 * 4 / 3 + 1;
                    self.answer(&reply_to_text(&heard), None, prompt);
                }
                true
            }
            LiveInput::Realtime(blob) if blob.is_audio() => {
                let rate = blob.sample_rate().unwrap_or(DEFAULT_INPUT_RATE);
                if rate != self.vad_rate {
                    self.vad = Vad::new(self.config.vad, rate);
                    self.vad_rate = rate;
                }
                let samples = from_bytes(&blob.data);
                if self.manual_activity {
                    if self.in_activity {
                        self.vad.feed(&samples);
                    }
                    return true;
                }
                for event in self.vad.feed(&samples) {
                    let ok = match event {
                        VadEvent::SpeechStart => self.interrupt().await,
                        VadEvent::SpeechEnd(utterance) => self.heard(utterance).await,
                    };
                    if !ok {
                        return false;
                    }
                }
                true
            }
            LiveInput::Realtime(blob) => {
                tracing::debug!(
                    mime_type = blob.mime_type,
                    bytes = blob.data.len(),
                    "sim ignores non-audio media"
                );
                true
            }
            LiveInput::ActivityStart => {
                self.in_activity = true;
                self.vad.finish();
                self.interrupt().await
            }
            LiveInput::ActivityEnd | LiveInput::AudioStreamEnd => {
                self.in_activity = false;
                match self.vad.finish() {
                    Some(utterance) => self.heard(utterance).await,
                    None => true,
                }
            }
            LiveInput::ToolResponse(responses) => {
                tracing::debug!(count = responses.len(), "sim ignores tool responses");
                true
            }
        }
    }

    /// Stops the answer being given, if any, with `interrupted`.
    async fn interrupt(&mut self) -> bool {
        if self.outbox.is_empty() {
            return true;
        }
        self.outbox.clear();
        self.send(LlmResponse {
            interrupted: true,
            model_version: Some("sim".into()),
            ..LlmResponse::default()
        })
        .await
    }

    /// An utterance ended: transcribe it and answer with a voice echo.
    async fn heard(&mut self, utterance: Vec<i16>) -> bool {
        let seconds = utterance.len() as f64 / f64::from(self.vad_rate);
        if self.connect.input_audio_transcription {
            let text = format!("(speech, {seconds:.1} s)");
            let message = LlmResponse {
                input_transcription: Some(crate::event::Transcription::new(text, false)),
                model_version: Some("sim".into()),
                ..LlmResponse::default()
            };
            if !self.send(message).await {
                return false;
            }
        }
        let echo = resample_to_output(&utterance, self.vad_rate);
        let prompt = (seconds * 32.0).ceil() as u64;
        self.answer(&reply_to_speech(seconds), Some(echo), prompt);
        true
    }

    /// Schedules an answer after the reply delay.
    fn answer(&mut self, reply: &str, voice: Option<Vec<i16>>, prompt_tokens: u64) {
        let style = AnswerStyle {
            audio: self.connect.modality() == Modality::Audio,
            transcribe: self.connect.output_audio_transcription,
            chunk: self.config.chunk,
            prompt_tokens,
        };
        let voice = if style.audio { voice } else { None };
        let start = Instant::now() + self.config.reply_delay;
        self.turns += 1;
        let mut plan = plan_answer(reply, voice, style);
        if self.connect.session_resumption.is_some() {
            if let Some((_, last)) = plan.last_mut() {
                last.session_resumption_update = Some(SessionResumptionUpdate {
                    new_handle: Some(format!("{}-{}", self.handle_prefix, self.turns)),
                    resumable: Some(true),
                });
            }
        }
        for (offset, message) in plan {
            let at = match self.config.pacing {
                Pacing::RealTime => start + offset,
                Pacing::Burst => start,
            };
            self.outbox.push_back((at, message));
        }
    }

    /// Sends every message that is due; false when the flow is gone.
    async fn send_due(&mut self) -> bool {
        let now = Instant::now();
        while self.outbox.front().is_some_and(|(at, _)| *at <= now) {
            let Some((_, message)) = self.outbox.pop_front() else {
                break;
            };
            if !self.send(message).await {
                return false;
            }
        }
        true
    }

    async fn send(&self, message: LlmResponse) -> bool {
        self.output.send(Ok(message)).await.is_ok()
    }
}
