//! What a flow does once a model connection ends (or never opens): connect again resuming the
//! model's context, connect afresh replaying the history, or end. A pure function of why the
//! connection ended, what the flow knows and its limits, so each rule is unit-tested alone.
//!
//! Every reconnect counts, `goAway` and resumable closes included; only progress (a finished
//! answer, or a connection that stayed up long) starts the count afresh, so a server that hangs
//! up on every connection, or asks every time to be left, meets the cap. Each reconnect but a
//! first `goAway` waits a growing, jittered delay ([`FlowLimits::backoff`]).

use std::time::Duration;

use super::{FlowEndReason, FlowLimits};
use crate::model::ModelError;

/// Why a model connection ended, or never opened.
#[derive(Debug, Clone)]
pub(crate) enum ConnectionEnd {
    /// Connecting failed.
    Refused(ModelError),
    /// The model ended the session (normally, or because the client closed).
    Closed,
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
    /// Reconnects since the last progress.
    pub failures: u32,
    /// The client closed its request queue.
    pub client_closed: bool,
}

/// What the flow does next.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AfterEnd {
    /// Connect again after `delay`, resuming with the handle if there is one; `failures` is the
    /// new count of reconnects since the last progress.
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

fn failed(error: FlowError) -> AfterEnd {
    AfterEnd::End(FlowEndReason::Failed, Some(error))
}

/// The end of a flow whose reconnects ran out: `UNAVAILABLE`, which a client may retry later.
fn gave_up(failures: u32, why: &str) -> AfterEnd {
    failed(FlowError {
        code: "UNAVAILABLE",
        message: format!(
            "the model is unavailable: {why}, {failures} times in a row without an answer; try again later"
        ),
    })
}

/// One more reconnect, or the end once `limits` allow no more.
fn retry(now: Attempts, limits: &FlowLimits, first_free: bool, why: &str) -> AfterEnd {
    let failures = now.failures.saturating_add(1);
    if failures > limits.max_reconnects {
        return gave_up(now.failures, why);
    }
    let delay = if first_free && failures == 1 {
        Duration::ZERO
    } else {
        limits.backoff(failures)
    };
    AfterEnd::Reconnect { failures, delay }
}

/// What follows a connection that ended for `end`.
pub(crate) fn next(end: &ConnectionEnd, now: Attempts, limits: &FlowLimits) -> AfterEnd {
    let resumable = |error: &ModelError| now.handle && error.is_resumable();
    match end {
        ConnectionEnd::Done(reason) => AfterEnd::End(reason.clone(), None),
        ConnectionEnd::Refused(error) => {
            if resumable(error) && now.failures < limits.max_reconnects {
                retry(now, limits, false, "")
            } else if now.untried_handle {
                AfterEnd::Replay
            } else {
                failed(error.into())
            }
        }
        // Nobody is listening any more: nothing to reconnect for.
        _ if now.client_closed => AfterEnd::End(FlowEndReason::Closed, None),
        ConnectionEnd::Blocked => AfterEnd::Restart,
        // The server asked to be left: the first time at once.
        ConnectionEnd::GoAway => retry(now, limits, true, "it asked to reconnect (goAway)"),
        ConnectionEnd::Dropped(error) if resumable(error) => retry(
            now,
            limits,
            false,
            &format!("its connection failed ({error})"),
        ),
        ConnectionEnd::Dropped(error) => failed(error.into()),
        ConnectionEnd::Closed if now.handle => retry(now, limits, false, "it closed the session"),
        // Without a handle the model's context is gone with its session: the conversation is over.
        ConnectionEnd::Closed => AfterEnd::End(FlowEndReason::Closed, None),
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

    fn limits() -> FlowLimits {
        FlowLimits::default()
    }

    /// The reconnect's count, and that its delay is within the jittered backoff.
    fn reconnects(next: AfterEnd) -> u32 {
        let AfterEnd::Reconnect { failures, delay } = next else {
            panic!("a reconnect: {next:?}")
        };
        let full = limits().reconnect_backoff * (1 << (failures - 1));
        assert!(delay <= full && delay >= full / 2, "{failures}: {delay:?}");
        failures
    }

    fn gives_up(next: AfterEnd) {
        let AfterEnd::End(FlowEndReason::Failed, Some(error)) = next else {
            panic!("the reconnects are used up: {next:?}")
        };
        assert_eq!(error.code, "UNAVAILABLE");
        assert!(error.message.contains("in a row"), "{}", error.message);
    }

    #[test]
    fn a_done_flow_ends_for_its_reason_whatever_else_holds() {
        let end = ConnectionEnd::Done(FlowEndReason::Transfer("billing".into()));
        for now in [Attempts::default(), with_handle(9)] {
            assert_eq!(
                next(&end, now, &limits()),
                AfterEnd::End(FlowEndReason::Transfer("billing".into()), None)
            );
        }
    }

    #[test]
    fn a_refused_connect_with_a_handle_retries_with_a_growing_delay_up_to_the_limit() {
        let end = ConnectionEnd::Refused(ModelError::Gone);
        assert_eq!(reconnects(next(&end, with_handle(0), &limits())), 1);
        assert_eq!(reconnects(next(&end, with_handle(2), &limits())), 3);
        let AfterEnd::End(FlowEndReason::Failed, Some(error)) =
            next(&end, with_handle(limits().max_reconnects), &limits())
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
        let end = ConnectionEnd::Refused(ModelError::Gone);
        assert_eq!(reconnects(next(&end, now, &limits())), 1);
    }

    #[test]
    fn a_refused_stored_handle_replays_the_history() {
        let now = Attempts {
            untried_handle: true,
            ..with_handle(0)
        };
        // Not resumable: straight to the replay.
        let end = ConnectionEnd::Refused(denied());
        assert_eq!(next(&end, now, &limits()), AfterEnd::Replay);
        // Resumable: the retries first, then the replay.
        let now = Attempts {
            failures: limits().max_reconnects,
            ..now
        };
        let end = ConnectionEnd::Refused(ModelError::Gone);
        assert_eq!(next(&end, now, &limits()), AfterEnd::Replay);
    }

    #[test]
    fn a_refused_connect_without_a_handle_fails_with_the_models_error() {
        let error = ModelError::Connect("no route".into());
        assert_eq!(
            next(
                &ConnectionEnd::Refused(error.clone()),
                Attempts::default(),
                &limits()
            ),
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
            ConnectionEnd::Closed,
        ] {
            assert_eq!(
                next(&end, now, &limits()),
                AfterEnd::End(FlowEndReason::Closed, None),
                "{end:?}"
            );
        }
    }

    #[test]
    fn a_blocked_answer_restarts_afresh() {
        assert_eq!(
            next(&ConnectionEnd::Blocked, with_handle(2), &limits()),
            AfterEnd::Restart
        );
    }

    #[test]
    fn a_first_go_away_reconnects_at_once_and_every_go_away_counts() {
        let first = next(&ConnectionEnd::GoAway, with_handle(0), &limits());
        assert_eq!(
            first,
            AfterEnd::Reconnect {
                failures: 1,
                delay: Duration::ZERO
            }
        );
        // Without a handle too (the history is replayed).
        assert!(matches!(
            next(&ConnectionEnd::GoAway, Attempts::default(), &limits()),
            AfterEnd::Reconnect { failures: 1, .. }
        ));
        // The next ones back off, and the cap ends a server that only ever says goAway.
        assert_eq!(
            reconnects(next(&ConnectionEnd::GoAway, with_handle(1), &limits())),
            2
        );
        gives_up(next(
            &ConnectionEnd::GoAway,
            with_handle(limits().max_reconnects),
            &limits(),
        ));
    }

    #[test]
    fn a_resumable_drop_with_a_handle_resumes_after_a_delay_up_to_the_limit() {
        let end = ConnectionEnd::Dropped(dropped());
        assert_eq!(reconnects(next(&end, with_handle(0), &limits())), 1);
        gives_up(next(&end, with_handle(limits().max_reconnects), &limits()));
    }

    #[test]
    fn a_drop_that_cannot_be_resumed_fails_at_once() {
        // Not resumable, with a handle.
        assert_eq!(
            next(&ConnectionEnd::Dropped(denied()), with_handle(0), &limits()),
            AfterEnd::End(FlowEndReason::Failed, Some((&denied()).into()))
        );
        // Resumable, but no handle to resume with.
        assert_eq!(
            next(
                &ConnectionEnd::Dropped(dropped()),
                Attempts::default(),
                &limits()
            ),
            AfterEnd::End(FlowEndReason::Failed, Some((&dropped()).into()))
        );
    }

    #[test]
    fn a_model_that_keeps_hanging_up_fails_the_flow() {
        assert_eq!(
            reconnects(next(&ConnectionEnd::Closed, with_handle(2), &limits())),
            3
        );
        gives_up(next(
            &ConnectionEnd::Closed,
            with_handle(limits().max_reconnects),
            &limits(),
        ));
    }

    #[test]
    fn a_close_without_a_handle_ends_the_conversation() {
        assert_eq!(
            next(&ConnectionEnd::Closed, Attempts::default(), &limits()),
            AfterEnd::End(FlowEndReason::Closed, None)
        );
    }
}
