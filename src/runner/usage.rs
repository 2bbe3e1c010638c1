//! A session's usage totals: the model's tokens (as it reports them, by modality where it says)
//! and the seconds of audio each way, kept in the session's state under [`USAGE_STATE_KEY`] and
//! stored with each usage event, so they are always as current as the last turn's end and no
//! store needs a table of its own.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::event::{ModalityTokenCount, UsageMetadata};

/// The session-state key of the totals (session-scoped: no `user:` or `app:` prefix; a user's
/// totals are the sum over their sessions).
pub const USAGE_STATE_KEY: &str = "livegate_usage";

/// Usage added up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct UsageTotals {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Answer tokens.
    pub output_tokens: u64,
    /// The model's totals.
    pub total_tokens: u64,
    /// Prompt tokens of audio, where the model says.
    pub input_audio_tokens: u64,
    /// Prompt tokens of text, where the model says.
    pub input_text_tokens: u64,
    /// Answer tokens of audio, where the model says.
    pub output_audio_tokens: u64,
    /// Answer tokens of text, where the model says.
    pub output_text_tokens: u64,
    /// Seconds of the client's audio sent to the model.
    pub audio_seconds_in: f64,
    /// Seconds of the model's audio.
    pub audio_seconds_out: f64,
    /// Model turns that reported usage.
    pub turns: u64,
}

impl UsageTotals {
    /// The totals kept in a session's state (zero if none, or unreadable).
    pub fn of_state(state: &Map<String, Value>) -> Self {
        state
            .get(USAGE_STATE_KEY)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default()
    }

    /// Adds one usage report.
    pub fn add(&mut self, usage: &UsageMetadata) {
        let tokens = |n: Option<u64>| n.unwrap_or(0);
        self.input_tokens += tokens(usage.prompt_token_count);
        self.output_tokens += tokens(usage.candidates_token_count);
        self.total_tokens += tokens(usage.total_token_count);
        self.input_audio_tokens += of(&usage.prompt_tokens_details, "AUDIO");
        self.input_text_tokens += of(&usage.prompt_tokens_details, "TEXT");
        self.output_audio_tokens += of(&usage.candidates_tokens_details, "AUDIO");
        self.output_text_tokens += of(&usage.candidates_tokens_details, "TEXT");
        self.turns += 1;
    }

    /// Adds another's totals (a user's sessions).
    pub fn merge(&mut self, other: &UsageTotals) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.total_tokens += other.total_tokens;
        self.input_audio_tokens += other.input_audio_tokens;
        self.input_text_tokens += other.input_text_tokens;
        self.output_audio_tokens += other.output_audio_tokens;
        self.output_text_tokens += other.output_text_tokens;
        self.audio_seconds_in += other.audio_seconds_in;
        self.audio_seconds_out += other.audio_seconds_out;
        self.turns += other.turns;
    }

    /// As stored in the state.
    pub fn to_value(self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

fn of(details: &Option<Vec<ModalityTokenCount>>, modality: &str) -> u64 {
    details
        .iter()
        .flatten()
        .filter(|c| c.modality.eq_ignore_ascii_case(modality))
        .map(|c| c.token_count)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_adds_up_by_modality_and_round_trips_through_the_state() {
        let mut totals = UsageTotals::default();
        let usage = UsageMetadata {
            prompt_token_count: Some(10),
            candidates_token_count: Some(30),
            total_token_count: Some(40),
            prompt_tokens_details: Some(vec![ModalityTokenCount {
                modality: "AUDIO".into(),
                token_count: 10,
            }]),
            candidates_tokens_details: Some(vec![ModalityTokenCount {
                modality: "TEXT".into(),
                token_count: 30,
            }]),
        };
        totals.add(&usage);
        totals.add(&usage);
        assert_eq!(
            (
                totals.input_tokens,
                totals.output_tokens,
                totals.total_tokens
            ),
            (20, 60, 80)
        );
        assert_eq!(
            (totals.input_audio_tokens, totals.output_text_tokens),
            (20, 60)
        );
        assert_eq!(totals.turns, 2);
        let mut state = Map::new();
        state.insert(USAGE_STATE_KEY.into(), totals.to_value());
        assert_eq!(UsageTotals::of_state(&state), totals);
        assert_eq!(UsageTotals::of_state(&Map::new()), UsageTotals::default());
    }
}
