//! What the listener has heard of the model's current answer, as a transport that knows tells it
//! (a phone call's `mark` acknowledgements come back as the caller's phone plays the audio).
//! A backend that must say where an interrupted answer was cut (OpenAI's
//! `conversation.item.truncate`) uses it instead of estimating from what was sent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Nothing reported for the current answer yet.
const UNKNOWN: u64 = u64::MAX;

/// The heard position of the current answer, shared by the transport (writes) and the model
/// connection (reads); cheap to clone. Observes only, so two configs that differ in it alone
/// compare equal.
#[derive(Debug, Clone)]
pub struct Playout(Arc<AtomicU64>);

impl Default for Playout {
    fn default() -> Self {
        Playout(Arc::new(AtomicU64::new(UNKNOWN)))
    }
}

impl PartialEq for Playout {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Playout {
    /// A new answer's audio started going out: nothing of it heard yet.
    pub fn answer_started(&self) {
        self.0.store(0, Ordering::Relaxed);
    }

    /// The listener has heard the current answer up to `position`.
    pub fn heard(&self, position: Duration) {
        let ms = u64::try_from(position.as_millis()).unwrap_or(UNKNOWN - 1);
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                (now == UNKNOWN || ms > now).then_some(ms)
            });
    }

    /// How much of the current answer the listener has heard, if the transport said.
    pub fn heard_so_far(&self) -> Option<Duration> {
        match self.0.load(Ordering::Relaxed) {
            UNKNOWN => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heard_position_only_moves_on_within_an_answer() {
        let playout = Playout::default();
        assert_eq!(playout.heard_so_far(), None);
        playout.answer_started();
        assert_eq!(playout.heard_so_far(), Some(Duration::ZERO));
        playout.heard(Duration::from_millis(400));
        playout.heard(Duration::from_millis(200));
        assert_eq!(playout.heard_so_far(), Some(Duration::from_millis(400)));
        playout.answer_started();
        assert_eq!(playout.heard_so_far(), Some(Duration::ZERO));
    }
}
