//! The live flow: one agent's live conversation with a model, as a stream of events.
//!
//! A send loop task forwards client requests to the model (realtime media past it, from the
//! sender's own task, while nothing sent earlier is still on its way); the stream itself reads
//! the model's responses and turns them into ADK events. Reconnects with the latest resumption
//! handle on `goAway` or a resumable drop; flushes every cached recording when it ends, whatever
//! the reason.

mod audio_cache;
mod hooks;
mod limits;
mod receive;
mod reconnect;
mod run;
mod screen;
pub(crate) mod send;
mod spill;
#[cfg(test)]
mod tests;
mod traced;

use std::sync::Arc;
use std::time::Duration;

pub use audio_cache::{
    set_max_unsaved_bytes, AudioCache, AudioSide, RecordingTarget, DEFAULT_MAX_UNSAVED_BYTES,
    RECORDING_DROPPED,
};
pub use hooks::{FlowHooks, NoHooks, Screened};
pub use limits::{
    FlowLimits, DEFAULT_ANSWER_TIMEOUT, DEFAULT_MAX_HANDLE_BYTES, DEFAULT_MAX_RECONNECTS,
    DEFAULT_MAX_TOOL_ROUNDS, DEFAULT_MAX_TURN_BYTES, DEFAULT_RECONNECT_BACKOFF,
    MAX_MODEL_ERRORS_PER_TURN, STABLE_CONNECTION,
};
pub use receive::{ResponseProcessor, Step, FUNCTION_CALL_ID_PREFIX};
pub use run::TOOL_CALL_CANCELLATION;

use crate::event::{Content, Event};
use crate::live::{LiveRequestReceiver, RunConfig};
use crate::model::{LiveConnectConfig, LiveModel};

/// Consecutive failed reconnects after which the run ends with an error (ADK's default; see
/// [`FlowLimits::max_reconnects`]).
pub const MAX_RECONNECT_ATTEMPTS: u32 = DEFAULT_MAX_RECONNECTS;

/// How long a flow keeps listening after a hand-off (transfer or `task_completed`) for the model
/// to finish its turn (ADK waits 1 s).
pub const DEFAULT_HANDOFF_DELAY: Duration = Duration::from_secs(1);

/// How long an answer under way may go on after the model's `goAway` before the flow ends it
/// (`interrupted`, `turnComplete`) and reconnects.
pub const GO_AWAY_ANSWER_GRACE: Duration = Duration::from_secs(2);

/// Name of the tool a sequential agent's sub-agents call when their task is done.
pub const TASK_COMPLETED: &str = "task_completed";

/// An event the flow produced, and whether the runner yields it (or only commits it).
#[derive(Debug, Clone, PartialEq)]
pub struct FlowItem {
    /// The event.
    pub event: Event,
    /// Yield to the caller (false: commit only, like ADK's user-content events).
    pub emit: bool,
    /// Store it with the session when ADK's live rule would (false: a notice for the client
    /// only, such as a recording that could not be saved: the node's storage, not the
    /// conversation, which a later turn's retry would otherwise store again and again).
    pub store: bool,
}

impl FlowItem {
    /// An event to commit and yield.
    pub fn emit(event: Event) -> Self {
        FlowItem {
            event,
            emit: true,
            store: true,
        }
    }

    /// An event of a recordings' flush: a `fileData` event is stored, an error is a notice.
    fn flushed(event: Event) -> Self {
        let store = event.error_code.is_none();
        FlowItem {
            event,
            emit: true,
            store,
        }
    }
}

/// Why a flow ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowEndReason {
    /// The client closed the queue, or the model ended the session.
    Closed,
    /// An unrecoverable error (already yielded as an error event).
    Failed,
    /// The model transferred the conversation to this agent.
    Transfer(String),
    /// The agent called `task_completed`.
    TaskCompleted,
    /// A tool or callback ended the invocation.
    InvocationEnded,
    /// The single turn of a turn-based run is over.
    TurnDone,
}

/// How a flow ended, with the client's requests for whoever runs next.
#[derive(Debug)]
pub struct FlowEnd {
    /// Why.
    pub reason: FlowEndReason,
    /// The request queue, unless it was lost with a failed send loop.
    pub requests: Option<LiveRequestReceiver>,
}

/// Everything one agent's live flow needs.
#[derive(Debug, Clone)]
pub struct LiveFlow {
    /// The model to talk to.
    pub model: Arc<dyn LiveModel>,
    /// How to connect (built from the agent and the run config).
    pub connect_config: LiveConnectConfig,
    /// The run's settings.
    pub run_config: RunConfig,
    /// Where recordings go, and ids for events.
    pub target: RecordingTarget,
    /// The agent's tools and callbacks.
    pub hooks: Arc<dyn FlowHooks>,
    /// Content the model answers right after connecting (not committed: it already is).
    pub prompt: Option<Content>,
    /// End after the first complete turn (turn-based runs).
    pub single_turn: bool,
    /// How long to keep listening after a hand-off.
    pub handoff_delay: Duration,
    /// Where a reconnect without a resumption handle reads the conversation so far (the
    /// `connect_config`'s history is the one the flow started with).
    pub history: Option<Arc<dyn HistorySource>>,
}

/// The conversation so far, as a fresh model session replays it.
#[async_trait::async_trait]
pub trait HistorySource: Send + Sync + std::fmt::Debug {
    /// The history as the session stands now.
    async fn history(&self) -> Result<Vec<Content>, crate::session::SessionError>;
}
