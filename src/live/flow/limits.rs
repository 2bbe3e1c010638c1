//! What a live flow allows a model server: how often it reconnects, how long an answer may take
//! to start, and how much one turn may bring. A broken or hostile server meets these bounds
//! instead of taking the gateway's memory, its store or the provider's quota with it.

use std::time::Duration;

/// The bounds of one flow (`RunConfig::limits`); the gateway sets them from its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowLimits {
    /// Reconnects in a row without progress (a finished answer, or a connection that stayed up
    /// [`STABLE_CONNECTION`]) before the run ends with `UNAVAILABLE`.
    pub max_reconnects: u32,
    /// The first reconnect's delay; each next one doubles it (up to 10 s, `MAX_BACKOFF`), less a
    /// random part of up to half (jitter), so many sessions dropped at once do not come back at
    /// once.
    pub reconnect_backoff: Duration,
    /// How long the model may take to start answering a turn the user ended (typed text or
    /// `activity_end`); past it the turn ends with `DEADLINE_EXCEEDED` and the connection counts
    /// as lost.
    pub answer_timeout: Duration,
    /// Bytes of text and transcription one turn may bring; past it the rest of the turn's text is
    /// dropped, with one `RESOURCE_EXHAUSTED` error event.
    pub max_turn_bytes: usize,
    /// Longest resumption handle kept; a longer one is dropped, with an error event.
    pub max_handle_bytes: usize,
    /// Tool-call rounds the model may start in one turn; past it the run ends with
    /// `RESOURCE_EXHAUSTED`.
    pub max_tool_rounds: u32,
}

/// Default of [`FlowLimits::max_reconnects`] (ADK's).
pub const DEFAULT_MAX_RECONNECTS: u32 = 5;
/// Default of [`FlowLimits::reconnect_backoff`].
pub const DEFAULT_RECONNECT_BACKOFF: Duration = Duration::from_millis(250);
/// Default of [`FlowLimits::answer_timeout`].
pub const DEFAULT_ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of [`FlowLimits::max_turn_bytes`].
pub const DEFAULT_MAX_TURN_BYTES: usize = 1024 * 1024;
/// Default of [`FlowLimits::max_handle_bytes`].
pub const DEFAULT_MAX_HANDLE_BYTES: usize = 16 * 1024;
/// Default of [`FlowLimits::max_tool_rounds`].
pub const DEFAULT_MAX_TOOL_ROUNDS: u32 = 16;

/// Longest delay between two reconnects.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A connection that stayed up this long was progress: whatever ends it starts the count of
/// reconnects afresh (a long idle session moved by a `goAway` now and then is no storm).
pub const STABLE_CONNECTION: Duration = Duration::from_secs(60);
/// In-band error events one turn may bring (OpenAI reports errors and keeps the session); more
/// are dropped, so a server repeating an error cannot flood the session's history.
pub const MAX_MODEL_ERRORS_PER_TURN: u32 = 8;

impl Default for FlowLimits {
    fn default() -> Self {
        FlowLimits {
            max_reconnects: DEFAULT_MAX_RECONNECTS,
            reconnect_backoff: DEFAULT_RECONNECT_BACKOFF,
            answer_timeout: DEFAULT_ANSWER_TIMEOUT,
            max_turn_bytes: DEFAULT_MAX_TURN_BYTES,
            max_handle_bytes: DEFAULT_MAX_HANDLE_BYTES,
            max_tool_rounds: DEFAULT_MAX_TOOL_ROUNDS,
        }
    }
}

impl FlowLimits {
    /// The delay before reconnect number `attempt` (1 for the first): the backoff doubled per
    /// attempt before it, capped, less up to half of it at random.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let doubled = self
            .reconnect_backoff
            .saturating_mul(1 << attempt.saturating_sub(1).min(16));
        let full = doubled.min(MAX_BACKOFF);
        // Randomness enough for jitter, from the crate that already draws ids.
        let draw = (uuid::Uuid::new_v4().as_u128() & 0xFFFF) as f64 / f64::from(u16::MAX);
        let jitter = draw * 0.5;
        full.mul_f64(1.0 - jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_with_jitter_up_to_the_cap() {
        let limits = FlowLimits::default();
        for attempt in 1..=8 {
            let full = (DEFAULT_RECONNECT_BACKOFF * (1 << (attempt - 1))).min(MAX_BACKOFF);
            for _ in 0..20 {
                let delay = limits.backoff(attempt);
                assert!(delay <= full && delay >= full / 2, "{attempt}: {delay:?}");
            }
        }
        assert!(limits.backoff(u32::MAX) <= MAX_BACKOFF);
    }
}
