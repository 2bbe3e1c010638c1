//! What the sim says: deterministic replies and their scheduled messages.

use std::time::Duration;

use bytes::Bytes;

use super::voice::{speak, to_bytes, OUTPUT_RATE};
use crate::event::{Blob, Content, ModalityTokenCount, Transcription, UsageMetadata};
use crate::model::LlmResponse;

/// One message of an answer and when to send it, relative to the answer's start.
pub type Scheduled = (Duration, LlmResponse);

/// How an answer is shaped.
#[derive(Debug, Clone, Copy)]
pub struct AnswerStyle {
    /// Speak (audio + transcription) rather than write.
    pub audio: bool,
    /// Send output transcription with spoken answers.
    pub transcribe: bool,
    /// Audio chunk length.
    pub chunk: Duration,
    /// Prompt tokens to report.
    pub prompt_tokens: u64,
}

/// The sim's reply to typed text.
pub fn reply_to_text(text: &str) -> String {
    let text = text.trim();
    let lower = text.to_lowercase();
    if lower.is_empty() {
        return "I didn't catch anything. Could you say that again?".into();
    }
    let quoted: String = text.chars().take(120).collect();
    if ["hello", "hi", "hey"].iter().any(|g| lower.starts_with(g)) {
        format!("Hello! I am the livegate simulator, an offline stand-in for a live model. You said: \"{quoted}\".")
    } else {
        format!("You said: \"{quoted}\". I am the livegate simulator, so I can only repeat what I hear, but I hear you clearly.")
    }
}

/// The sim's spoken reply to an utterance of `seconds`.
pub fn reply_to_speech(seconds: f64) -> String {
    format!("I heard you speak for {seconds:.1} seconds, and here it is back.")
}

/// Splits text into fragments of `words` words whose concatenation is the text.
pub fn fragments(text: &str, words: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut count = 0;
    for (i, piece) in text.split_inclusive(' ').enumerate() {
        current.push_str(piece);
        count += 1;
        if count == words.max(1) || i + 1 == text.split_inclusive(' ').count() {
            out.push(std::mem::take(&mut current));
            count = 0;
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

fn message() -> LlmResponse {
    LlmResponse {
        model_version: Some("sim".into()),
        ..LlmResponse::default()
    }
}

fn usage(prompt: u64, candidates: u64, modality: &str) -> LlmResponse {
    LlmResponse {
        usage_metadata: Some(UsageMetadata {
            candidates_token_count: Some(candidates),
            candidates_tokens_details: Some(vec![ModalityTokenCount {
                modality: modality.into(),
                token_count: candidates,
            }]),
            prompt_token_count: Some(prompt),
            prompt_tokens_details: None,
            total_token_count: Some(prompt + candidates),
        }),
        ..message()
    }
}

fn audio_chunks(samples: &[i16], chunk: Duration) -> Vec<(Duration, LlmResponse)> {
    let per_chunk = ((OUTPUT_RATE as u128 * chunk.as_millis()) / 1000).max(1) as usize;
    samples
        .chunks(per_chunk)
        .enumerate()
        .map(|(i, c)| {
            let at = chunk * i as u32;
            let blob = Blob::new(
                Bytes::from(to_bytes(c)),
                format!("audio/pcm;rate={OUTPUT_RATE}"),
            );
            (
                at,
                LlmResponse {
                    content: Some(Content::blob("model", blob)),
                    ..message()
                },
            )
        })
        .collect()
}

fn sample_time(samples: usize) -> Duration {
    Duration::from_secs_f64(samples as f64 / f64::from(OUTPUT_RATE))
}

fn transcription(text: String) -> LlmResponse {
    LlmResponse {
        output_transcription: Some(Transcription::new(text, false)),
        ..message()
    }
}

/// Plans an answer: the reply text, spoken (with `voice` samples, or synthesized) or written.
pub fn plan_answer(reply: &str, voice: Option<Vec<i16>>, style: AnswerStyle) -> Vec<Scheduled> {
    let mut plan: Vec<Scheduled> = Vec::new();
    let end;
    let candidates;
    if style.audio {
        let words: Vec<&str> = reply.split_whitespace().collect();
        let pieces = fragments(reply, 1);
        let (samples, starts) = match voice {
            Some(samples) => {
                // Spread the transcript evenly over the echoed voice.
                let n = samples.len();
                let starts = (0..pieces.len())
                    .map(|i| i * n / pieces.len().max(1))
                    .collect();
                (samples, starts)
            }
            None => speak(&words),
        };
        for (piece, start) in pieces.into_iter().zip(starts) {
            if style.transcribe {
                plan.push((sample_time(start), transcription(piece)));
            }
        }
        plan.extend(audio_chunks(&samples, style.chunk));
        plan.sort_by_key(|(at, _)| *at);
        end = sample_time(samples.len());
        candidates = (end.as_secs_f64() * 25.0).ceil() as u64;
    } else {
        let pieces = fragments(reply, 2);
        let step = Duration::from_millis(30);
        for (i, piece) in pieces.iter().enumerate() {
            let content = Content::text("model", piece.clone());
            plan.push((
                step * i as u32,
                LlmResponse {
                    content: Some(content),
                    ..message()
                },
            ));
        }
        end = step * pieces.len() as u32;
        candidates = (reply.split_whitespace().count() as u64 * 4).div_ceil(3);
    }
    let modality = if style.audio { "AUDIO" } else { "TEXT" };
    plan.push((end, usage(style.prompt_tokens, candidates, modality)));
    plan.push((
        end,
        LlmResponse {
            generation_complete: true,
            ..message()
        },
    ));
    plan.push((
        end,
        LlmResponse {
            turn_complete: true,
            ..message()
        },
    ));
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_concatenate_to_the_text() {
        let text = "Hello! I am the livegate simulator.";
        for n in 1..4 {
            assert_eq!(fragments(text, n).concat(), text);
        }
        assert_eq!(fragments(text, 2).len(), 3);
    }
}
