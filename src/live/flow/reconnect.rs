//! What a flow does once a model connection ends (or never opens): connect again resuming the
//! model's context, connect afresh replaying the history, or end. A pure function of why the
//! connection ended and what the flow knows, so each rule is unit-tested alone.

use std::time::Duration;

use super::{FlowEndReason, MAX_RECONNECT_ATTEMPTS};
use crate::model::ModelError;

/// Why a model connection ended, or never opened.
#[derive(Debug, Clone)]
pub(crate) enum ConnectionEnd {
    /// Connecting failed.
    Refused(ModelError),
    /// The model ended the session (normally, or because the client closed).
    Closed {
        /// The model said something first: a connection that ends at once counts as a failure,
        /// so a model that keeps hanging up cannot make the flow spin.
        responded: bool,
    },
    /// The model asked for a reconnect (`goAway`).
    GoAway,
    /// The connection failed.
    Dropped(ModelError),
    /// A callback blocked the model's answer: start a fresh model session (ADK's RESTART).
    Blocked,
    /// The flow is done for another reason.
    Done(FlowEndReason),
}

/// What the flow knows when a connection ends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Attempts {
    /// The flow holds a resumption handle.
    pub handle: bool,
    /// That handle came with the run (stored with the session) and no model accepted it yet.
    pub untried_handle: bool,
    /// Failed connections in a row so far.
    pub failures: u32,
    /// The client closed its request queue.
    pub client_closed: bool,
}

/// What the flow does next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AfterEnd {
    /// Connect again after `delay`, resuming with the handle if there is one; `failures` is the
    /// new count of failed connections in a row.
    Reconnect { failures: u32, delay: Duration },
    /// Connect again afresh: the handle dropped, the history replayed.
    Restart,
    /// The model refused the handle the run started with: connect as if the run had none.
    Replay,
    /// End the flow, after an error event when there is one.
    End(FlowEndReason, Option<FlowError>),
}

/// The error event a failed flow ends with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FlowError {
    /// ADK's error code.
    pub code: &'static str,
    /// What happened.
    pub message: String,
}

impl From<&ModelError> for FlowError {
    fn from(error: &ModelError) -> Self {
        FlowError {
            code: error.code(),
            message: error.to_string(),
        }
    }
}

/// How long a failed connect waits before the next one: longer each time.
fn backoff(failures: u32) -> Duration {
    Duration::from_millis(100 * u64::from(failures))
}

fn failed(error: FlowError) -> AfterEnd {
    AfterEnd::End(FlowEndReason::Failed, Some(error))
}

/// What follows a connection that ended for `end`.
pub(crate) fn next(end: &ConnectionEnd, now: Attempts) -> AfterEnd {
    let resumable = |error: &ModelError| now.handle && error.is_resumable();
    match end {
        ConnectionEnd::Done(reason) => AfterEnd::End(reason.clone(), None),
        ConnectionEnd::Refused(error) => {
            let failures = now.failures + 1;
            if resumable(error) && failures <= MAX_RECONNECT_ATTEMPTS {
                AfterEnd::Reconnect {
                    failures,
                    delay: backoff(failures),
                }
            } else if now.untried_handle {
                AfterEnd::Replay
            } else {
                failed(error.into())
            }
        }
        // Nobody is listening any more: nothing to reconnect for.
        _ if now.client_closed => AfterEnd::End(FlowEndReason::Closed, None),
        ConnectionEnd::Blocked => AfterEnd::Restart,
        ConnectionEnd::GoAway => AfterEnd::Reconnect {
            failures: now.failures,
            delay: Duration::ZERO,
        },
        ConnectionEnd::Dropped(error) if resumable(error) => {
            let failures = now.failures + 1;
            if failures <= MAX_RECONNECT_ATTEMPTS {
                AfterEnd::Reconnect {
                    failures,
                    delay: Duration::ZERO,
                }
            } else {
                failed(error.into())
            }
        }
        ConnectionEnd::Dropped(error) => failed(error.into()),
        ConnectionEnd::Closed { responded } if now.handle => {
            let failures = now.failures + u32::from(!responded);
            if failures <= MAX_RECONNECT_ATTEMPTS {
                AfterEnd::Reconnect {
                    failures,
                    delay: Duration::ZERO,
                }
            } else {
                failed(FlowError {
                    code: "UNAVAILABLE",
                    message: "the model keeps closing the session".into(),
                })
            }
        }
        // Without a handle the model's context is gone with its session: the conversation is over.
        ConnectionEnd::Closed { .. } => AfterEnd::End(FlowEndReason::Closed, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1011 close: resumable.
    fn dropped() -> ModelError {
        ModelError::Closed {
            code: 1011,
            reason: "internal".into(),
        }
    }

    /// A 1008 close: not resumable.
    fn denied() -> ModelError {
        ModelError::Closed {
            code: 1008,
            reason: "policy".into(),
        }
    }

    fn with_handle(failures: u32) -> Attempts {
        Attempts {
            handle: true,
            failures,
            ..Attempts::default()
        }
    }

    fn reconnect(failures: u32) -> AfterEnd {
        AfterEnd::Reconnect {
            failures,
            delay: Duration::ZERO,
        }
    }

    #[test]
    fn a_done_flow_ends_for_its_reason_whatever_else_holds() {
        let end = ConnectionEnd::Done(FlowEndReason::Transfer("billing".into()));
        for now in [Attempts::default(), with_handle(9)] {
            assert_eq!(
                next(&end, now),
                AfterEnd::End(FlowEndReason::Transfer("billing".into()), None)
            );
        }
    }

    #[test]
    fn a_refused_connect_with_a_handle_retries_with_a_growing_delay_up_to_the_limit() {
        let end = ConnectionEnd::Refused(ModelError::Gone);
        assert_eq!(
            next(&end, with_handle(0)),
            AfterEnd::Reconnect {
                failures: 1,
                delay: Duration::from_millis(100)
            }
        );
        assert_eq!(
            next(&end, with_handle(2)),
            AfterEnd::Reconnect {
                failures: 3,
                delay: Duration::from_millis(300)
            }
        );
        let AfterEnd::End(FlowEndReason::Failed, Some(error)) =
            next(&end, with_handle(MAX_RECONNECT_ATTEMPTS))
        else {
            panic!("the attempts are used up")
        };
        assert_eq!(error.code, "UNAVAILABLE");
    }

    #[test]
    fn a_refused_connect_is_retried_even_once_the_client_closed() {
        let now = Attempts {
            client_closed: true,
            ..with_handle(0)
        };
        assert!(matches!(
            next(&ConnectionEnd::Refused(ModelError::Gone), now),
            AfterEnd::Reconnect { failures: 1, .. }
        ));
    }

    #[test]
    fn a_refused_stored_handle_replays_the_history() {
        let now = Attempts {
            untried_handle: true,
            ..with_handle(0)
        };
        // Not resumable: straight to the replay.
        assert_eq!(
            next(&ConnectionEnd::Refused(denied()), now),
            AfterEnd::Replay
        );
        // Resumable: the retries first, then the replay.
        let now = Attempts {
            failures: MAX_RECONNECT_ATTEMPTS,
            ..now
        };
        assert_eq!(
            next(&ConnectionEnd::Refused(ModelError::Gone), now),
            AfterEnd::Replay
        );
    }

    #[test]
    fn a_refused_connect_without_a_handle_fails_with_the_models_error() {
        let error = ModelError::Connect("no route".into());
        assert_eq!(
            next(&ConnectionEnd::Refused(error.clone()), Attempts::default()),
            AfterEnd::End(FlowEndReason::Failed, Some((&error).into()))
        );
    }

    #[test]
    fn once_the_client_closed_a_connection_that_ends_ends_the_flow() {
        let now = Attempts {
            client_closed: true,
            ..with_handle(0)
        };
        for end in [
            ConnectionEnd::Blocked,
            ConnectionEnd::GoAway,
            ConnectionEnd::Dropped(dropped()),
            ConnectionEnd::Closed { responded: true },
        ] {
            assert_eq!(
                next(&end, now),
                AfterEnd::End(FlowEndReason::Closed, None),
                "{end:?}"
            );
        }
    }

    #[test]
    fn a_blocked_answer_restarts_afresh() {
        assert_eq!(
            next(&ConnectionEnd::Blocked, with_handle(2)),
            AfterEnd::Restart
        );
    }

    #[test]
    fn go_away_reconnects_at_once_without_counting_a_failure() {
        assert_eq!(next(&ConnectionEnd::GoAway, with_handle(2)), reconnect(2));
        // Without a handle too (the history is replayed).
        assert_eq!(
            next(&ConnectionEnd::GoAway, Attempts::default()),
            reconnect(0)
        );
    }

    #[test]
    fn a_resumable_drop_with_a_handle_resumes_up_to_the_limit() {
        let end = ConnectionEnd::Dropped(dropped());
        assert_eq!(next(&end, with_handle(0)), reconnect(1));
        assert_eq!(
            next(&end, with_handle(MAX_RECONNECT_ATTEMPTS)),
            AfterEnd::End(FlowEndReason::Failed, Some((&dropped()).into()))
        );
    }

    #[test]
    fn a_drop_that_cannot_be_resumed_fails_at_once() {
        // Not resumable, with a handle.
        assert_eq!(
            next(&ConnectionEnd::Dropped(denied()), with_handle(0)),
            AfterEnd::End(FlowEndReason::Failed, Some((&denied()).into()))
        );
        // Resumable, but no handle to resume with.
        assert_eq!(
            next(&ConnectionEnd::Dropped(dropped()), Attempts::default()),
            AfterEnd::End(FlowEndReason::Failed, Some((&dropped()).into()))
        );
    }

    #[test]
    fn a_close_with_a_handle_resumes_and_counts_only_a_silent_connection() {
        assert_eq!(
            next(&ConnectionEnd::Closed { responded: true }, with_handle(2)),
            reconnect(2)
        );
        assert_eq!(
            next(&ConnectionEnd::Closed { responded: false }, with_handle(2)),
            reconnect(3)
        );
    }

    #[test]
    fn a_model_that_keeps_hanging_up_fails_the_flow() {
        let now = with_handle(MAX_RECONNECT_ATTEMPTS);
        assert_eq!(
            next(&ConnectionEnd::Closed { responded: true }, now),
            reconnect(MAX_RECONNECT_ATTEMPTS)
        );
        let AfterEnd::End(FlowEndReason::Failed, Some(error)) =
            next(&ConnectionEnd::Closed { responded: false }, now)
        else {
            panic!("a silent close past the limit fails")
        };
        assert_eq!(error.code, "UNAVAILABLE");
    }

    #[test]
    fn a_close_without_a_handle_ends_the_conversation() {
        assert_eq!(
            next(
                &ConnectionEnd::Closed { responded: true },
                Attempts::default()
            ),
            AfterEnd::End(FlowEndReason::Closed, None)
        );
    }
}
