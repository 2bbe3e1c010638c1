//! One answer as a timeline of messages: text fragments, or output transcription plus audio chunks,
//! then usage, `generationComplete` and `turnComplete`. Audio is rendered only when its chunk is sent.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::replies::{audio_tokens, spoken_fragments, text_tokens, written_fragments};
use super::voice::{Synth, Voice, OUTPUT_MIME, OUTPUT_RATE};
use crate::event::{Blob, Content, ModalityTokenCount, Part, Transcription, UsageMetadata};
use crate::model::{LlmResponse, Modality};

/// Prompt token counts of a turn, by modality.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PromptTokens {
    /// Text tokens (instruction, history, typed turns, transcripts of earlier answers).
    pub text: u64,
    /// Audio tokens (speech heard).
    pub audio: u64,
}

impl PromptTokens {
    /// All prompt tokens.
    pub fn total(&self) -> u64 {
        self.text + self.audio
    }
}

/// How an answer is shaped.
#[derive(Debug, Clone, Copy)]
pub struct AnswerStyle {
    /// Written (TEXT) or spoken (AUDIO).
    pub modality: Modality,
    /// Send output transcription with spoken answers.
    pub transcribe: bool,
    /// Send each message when a speaking voice would (else all at once).
    pub real_time: bool,
    /// Output audio chunk length, in samples.
    pub chunk_samples: usize,
    /// Words per text fragment.
    pub text_words: usize,
    /// Time between text fragments.
    pub text_interval: Duration,
}

/// One message of an answer, rendered when sent.
#[derive(Debug, Clone)]
enum Step {
    Text(String),
    Transcript(String),
    Audio { start: usize, end: usize },
    Usage(UsageMetadata),
    GenerationComplete,
    TurnComplete,
}

/// An answer being given: its remaining messages and when each is due.
#[derive(Debug)]
pub struct Answer {
    base: Instant,
    real_time: bool,
    steps: VecDeque<(Duration, Step)>,
    voice: Option<Voice>,
    duration: Duration,
    started: bool,
    candidates: u64,
    prompt: PromptTokens,
    modality: &'static str,
    /// When livegate read the client audio this answers; given to the first audio or text.
    pub prompted_by: Option<std::time::Instant>,
}

/// The usage message of an answer: `prompt` in, `candidates` tokens of `modality` out.
fn usage(prompt: PromptTokens, candidates: u64, modality: &str) -> UsageMetadata {
    UsageMetadata {
        candidates_token_count: Some(candidates),
        candidates_tokens_details: Some(vec![ModalityTokenCount {
            modality: modality.into(),
            token_count: candidates,
        }]),
        prompt_token_count: Some(prompt.total()),
        prompt_tokens_details: Some(
            [("TEXT", prompt.text), ("AUDIO", prompt.audio)]
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(modality, token_count)| ModalityTokenCount {
                    modality: modality.into(),
                    token_count,
                })
                .collect(),
        ),
        total_token_count: Some(prompt.total() + candidates),
    }
}

/// The time `samples` output samples take to play.
fn play_time(samples: usize) -> Duration {
    Duration::from_nanos((samples as u128 * 1_000_000_000 / u128::from(OUTPUT_RATE)) as u64)
}

impl Answer {
    /// Plans the answer `text`, starting at `base`. `echo` is the voice to speak with in AUDIO
    /// modality (the user's utterance); without it the reply text is synthesized.
    pub fn new(
        text: &str,
        echo: Option<Voice>,
        prompt: PromptTokens,
        style: AnswerStyle,
        base: Instant,
    ) -> Self {
        let mut steps: Vec<(Duration, Step)> = Vec::new();
        let (voice, duration, candidates, modality) = match style.modality {
            Modality::Text => {
                let fragments = written_fragments(text, style.text_words);
                let count = fragments.len() as u32;
                for (i, fragment) in fragments.into_iter().enumerate() {
                    steps.push((style.text_interval * i as u32, Step::Text(fragment)));
                }
                (None, style.text_interval * count, text_tokens(text), "TEXT")
            }
            Modality::Audio => {
                let fragments = spoken_fragments(text);
                let (voice, starts) = match echo {
                    Some(voice) => {
                        // Spread the transcript evenly over the echoed voice.
                        let n = voice.len();
                        let count = fragments.len().max(1);
                        let starts = (0..fragments.len()).map(|i| i * n / count).collect();
                        (voice, starts)
                    }
                    None => {
                        let synth = Synth::speak(text);
                        let starts = synth.word_starts().to_vec();
                        (Voice::Synth(synth), starts)
                    }
                };
                if style.transcribe {
                    for (fragment, start) in fragments.into_iter().zip(starts) {
                        steps.push((play_time(start), Step::Transcript(fragment)));
                    }
                }
                let len = voice.len();
                let chunk = style.chunk_samples.max(1);
                for start in (0..len).step_by(chunk) {
                    let end = (start + chunk).min(len);
                    steps.push((play_time(start), Step::Audio { start, end }));
                }
                // Transcripts were pushed first, so a stable sort keeps them ahead of the audio
                // chunk that starts at the same moment.
                steps.sort_by_key(|(at, _)| *at);
                let duration = play_time(len);
                let tokens = audio_tokens(duration.as_secs_f64());
                (Some(voice), duration, tokens, "AUDIO")
            }
        };
        steps.push((duration, Step::Usage(usage(prompt, candidates, modality))));
        steps.push((duration, Step::GenerationComplete));
        steps.push((duration, Step::TurnComplete));
        Answer {
            base,
            real_time: style.real_time,
            steps: steps.into(),
            voice,
            duration,
            started: false,
            candidates,
            prompt,
            modality,
            prompted_by: None,
        }
    }

    /// The usage of an answer stopped now: its prompt, and the share of its tokens already sent
    /// (Gemini counts what it generated before the interruption).
    pub fn interrupted_usage(&self) -> UsageMetadata {
        // What was sent reaches up to the next message's offset.
        let sent = self
            .steps
            .front()
            .map_or(self.duration, |(offset, _)| *offset);
        let share = if self.duration.is_zero() {
            1.0
        } else {
            (sent.as_secs_f64() / self.duration.as_secs_f64()).clamp(0.0, 1.0)
        };
        let candidates = (self.candidates as f64 * share).ceil() as u64;
        usage(self.prompt, candidates, self.modality)
    }

    /// When the next message is due, if any is left.
    pub fn next_due(&self) -> Option<Instant> {
        self.steps.front().map(|(offset, _)| self.at(*offset))
    }

    /// When the answer's last message is due.
    pub fn ends_at(&self) -> Instant {
        self.at(self.duration)
    }

    /// True once a message of the answer has been sent (so stopping it is an interruption).
    pub fn started(&self) -> bool {
        self.started
    }

    /// True when every message has been taken.
    pub fn is_done(&self) -> bool {
        self.steps.is_empty()
    }

    /// Tokens the answer generates.
    pub fn candidates(&self) -> u64 {
        self.candidates
    }

    /// Takes the next message, rendering its audio now.
    pub fn next_message(&mut self) -> Option<LlmResponse> {
        let (_, step) = self.steps.pop_front()?;
        self.started = true;
        let mut message = LlmResponse {
            model_version: Some("sim".into()),
            ..LlmResponse::default()
        };
        match step {
            // Gemini's `modelTurn` carries no role; ADK passes that on, so neither do we.
            Step::Text(text) => {
                message.content = Some(Content {
                    parts: vec![Part::text(text)],
                    role: None,
                });
            }
            Step::Transcript(text) => {
                message.output_transcription = Some(Transcription::new(text, false));
            }
            Step::Audio { start, end } => {
                let data = self
                    .voice
                    .as_ref()
                    .map(|v| v.render(start, end))
                    .unwrap_or_default();
                message.content = Some(Content {
                    parts: vec![Part {
                        inline_data: Some(Blob::new(data, OUTPUT_MIME)),
                        ..Part::default()
                    }],
                    role: None,
                });
            }
            Step::Usage(usage) => message.usage_metadata = Some(usage),
            Step::GenerationComplete => message.generation_complete = true,
            Step::TurnComplete => message.turn_complete = true,
        }
        // The answer's first audio or text (transcripts are not content) carries the stamp.
        if let Some(part) = message.content.as_mut().and_then(|c| c.parts.first_mut()) {
            part.prompted_by = self.prompted_by.take();
        }
        Some(message)
    }

    fn at(&self, offset: Duration) -> Instant {
        if self.real_time {
            self.base + offset
        } else {
            self.base
        }
    }
}
