//! What the sim says: deterministic replies to what it heard, their fragments, and token estimates.

use crate::model::{LiveConnectConfig, Modality};

/// What the user said in one turn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Heard<'a> {
    /// Typed text (a complete content turn, with any earlier partial turns before it).
    Text(&'a str),
    /// An utterance of speech lasting `seconds`.
    Speech {
        /// Duration of the utterance.
        seconds: f64,
    },
}

/// What the sim decides to do about a turn.
///
/// Only speaking exists today; tool calls (SPEC §3.1) will be another variant chosen by
/// [`plan_reply`] from the agent's tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Answer with this text (written in TEXT modality, spoken in AUDIO modality).
    Say(String),
}

/// Decides the reply to one turn.
pub fn plan_reply(heard: &Heard<'_>, config: &LiveConnectConfig) -> Reply {
    match *heard {
        Heard::Text(text) => Reply::Say(text_reply(text)),
        Heard::Speech { seconds } => Reply::Say(speech_reply(seconds, config.modality())),
    }
}

/// Words of the user's text quoted back at most.
const QUOTE_WORDS: usize = 12;

/// The reply to typed text: `Hello! I'm the livegate simulator. You said: "…".`, plus a sentence
/// for longer inputs.
pub fn text_reply(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.is_empty() {
        return "Hello! I'm the livegate simulator. I didn't catch any words. Could you say that again?"
            .into();
    }
    let mut quote = words[..words.len().min(QUOTE_WORDS)].join(" ");
    if words.len() > QUOTE_WORDS {
        quote.push('…');
    }
    let mut reply = format!("Hello! I'm the livegate simulator. You said: \"{quote}\".");
    if words.len() > 6 {
        reply.push_str(&format!(
            " That was {} words. I run offline, so all I can do is repeat them.",
            words.len()
        ));
    }
    reply
}

/// The reply to an utterance: `You said something for 2.9 seconds.` (spoken over the voice echo),
/// with an explanation added in TEXT modality, where there is no echo.
pub fn speech_reply(seconds: f64, modality: Modality) -> String {
    let said = format!("You said something for {seconds:.1} seconds.");
    match modality {
        Modality::Audio => said,
        Modality::Text => {
            format!(
                "{said} I'm the livegate simulator, so I can hear speech but not understand it."
            )
        }
    }
}

/// The input transcription of an utterance: `[speech 2.86 s]`.
pub fn speech_transcript(seconds: f64) -> String {
    format!("[speech {seconds:.2} s]")
}

/// Output transcription fragments: one per word, later words with a leading space, so that
/// they concatenate to the text (for text with single spaces, as the replies have).
pub fn spoken_fragments(text: &str) -> Vec<String> {
    text.split_whitespace()
        .enumerate()
        .map(|(i, word)| {
            if i == 0 {
                word.to_owned()
            } else {
                format!(" {word}")
            }
        })
        .collect()
}

/// Text fragments of `words` words each, later fragments with a leading space.
pub fn written_fragments(text: &str, words: usize) -> Vec<String> {
    let all: Vec<&str> = text.split_whitespace().collect();
    all.chunks(words.max(1))
        .enumerate()
        .map(|(i, chunk)| {
            let joined = chunk.join(" ");
            if i == 0 {
                joined
            } else {
                format!(" {joined}")
            }
        })
        .collect()
}

/// Tokens of text, estimated like Gemini's tokenizer on English (about 4 characters each).
pub fn text_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// Tokens of audio: Gemini counts 32 per second.
pub fn audio_tokens(seconds: f64) -> u64 {
    (seconds.max(0.0) * 32.0).ceil() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_recognisable_and_bounded() {
        assert_eq!(
            text_reply(" hello "),
            "Hello! I'm the livegate simulator. You said: \"hello\"."
        );
        let long = text_reply(
            "tell me a long story about a lighthouse keeper who finds a message in a bottle",
        );
        assert!(long.contains(
            "You said: \"tell me a long story about a lighthouse keeper who finds a…\"."
        ));
        assert!(long.contains("That was 16 words."));
        let words = long.split_whitespace().count();
        assert!((10..=35).contains(&words), "{words} words");
        assert!(text_reply("").contains("didn't catch"));
        assert_eq!(speech_transcript(2.856), "[speech 2.86 s]");
        assert_eq!(
            speech_reply(2.856, Modality::Audio),
            "You said something for 2.9 seconds."
        );
    }

    #[test]
    fn fragments_concatenate_to_the_text() {
        let text = text_reply("what time is it?");
        assert_eq!(spoken_fragments(&text).concat(), text);
        for n in 1..5 {
            assert_eq!(written_fragments(&text, n).concat(), text);
        }
        assert_eq!(written_fragments("a b c d e", 2), vec!["a b", " c d", " e"]);
        assert_eq!(spoken_fragments("a b"), vec!["a", " b"]);
    }
}
