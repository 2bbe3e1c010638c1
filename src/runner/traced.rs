//! A run's trace span (`invoke_agent`) and what the runner adds up on it: the session store's
//! commits are counted and timed here rather than given a span each, so a long call is not one
//! span per committed event.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;

use crate::trace_context::SPAN_TARGET;

/// The span of one invocation, made in the caller's span (the connection's, or the `run`
/// request's). Disabled, and free, when traces are off.
pub(super) fn invocation_span(
    invocation_id: &str,
    agent: &str,
    session_id: &str,
    live: bool,
) -> tracing::Span {
    tracing::info_span!(
        target: SPAN_TARGET,
        "invocation",
        otel.name = %format_args!("invoke_agent {agent}"),
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = agent,
        gen_ai.conversation.id = session_id,
        livegate.invocation_id = invocation_id,
        livegate.run_mode = if live { "live" } else { "turn" },
        livegate.session.commits = tracing::field::Empty,
        livegate.session.committed_events = tracing::field::Empty,
        livegate.session.commit_seconds = tracing::field::Empty,
        livegate.session.commit_max_seconds = tracing::field::Empty,
        livegate.session.commit_failures = tracing::field::Empty,
    )
}

/// The session store's commits of one run, recorded on its span when the run ends.
#[derive(Debug)]
pub(super) struct CommitTally {
    span: tracing::Span,
    commits: AtomicU64,
    events: AtomicU64,
    failures: AtomicU64,
    nanos: AtomicU64,
    max_nanos: AtomicU64,
}

impl CommitTally {
    pub fn new(span: tracing::Span) -> Self {
        CommitTally {
            span,
            commits: AtomicU64::new(0),
            events: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            nanos: AtomicU64::new(0),
            max_nanos: AtomicU64::new(0),
        }
    }

    /// One commit of `events` events that took `took`, `failed` of them refused.
    pub fn add(&self, events: usize, failed: usize, took: Duration) {
        if self.span.is_disabled() {
            return;
        }
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.events.fetch_add(events as u64, Ordering::Relaxed);
        self.failures.fetch_add(failed as u64, Ordering::Relaxed);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
        self.max_nanos.fetch_max(nanos, Ordering::Relaxed);
    }
}

impl Drop for CommitTally {
    fn drop(&mut self) {
        if self.span.is_disabled() {
            return;
        }
        let seconds = |n: &AtomicU64| Duration::from_nanos(n.load(Ordering::Relaxed)).as_secs_f64();
        // As i64: the OpenTelemetry bridge exports a u64 as a string.
        let count = |n: &AtomicU64| i64::try_from(n.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
        self.span
            .record("livegate.session.commits", count(&self.commits))
            .record("livegate.session.committed_events", count(&self.events))
            .record("livegate.session.commit_seconds", seconds(&self.nanos))
            .record(
                "livegate.session.commit_max_seconds",
                seconds(&self.max_nanos),
            )
            .record("livegate.session.commit_failures", count(&self.failures));
    }
}

pin_project_lite::pin_project! {
    /// A run's events polled inside its span: what the flow does when the caller asks for the
    /// next event (connect, call tools, save recordings) happens in the invocation, whichever
    /// task polls it. The span ends when the stream is dropped.
    pub(super) struct InSpan<S> {
        #[pin]
        inner: S,
        span: tracing::Span,
    }
}

impl<S> InSpan<S> {
    pub fn new(inner: S, span: tracing::Span) -> Self {
        InSpan { inner, span }
    }
}

impl<S: Stream> Stream for InSpan<S> {
    type Item = S::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let this = self.project();
        let _entered = this.span.enter();
        this.inner.poll_next(cx)
    }
}
