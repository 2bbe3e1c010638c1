//! What an agent plugs into its live flow: tool execution and the callbacks that screen traffic.
//! The flow knows when to ask; the agent layer knows what tools and callbacks there are.

use std::collections::HashMap;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::event::{Content, Event, FunctionCall};
use crate::live::LiveRequest;
use crate::model::{LiveInput, LlmResponse};

/// The agent's side of a live flow.
#[async_trait]
pub trait FlowHooks: Send + Sync + std::fmt::Debug {
    /// Ids of the calls that are long-running (listed in the call event's `longRunningToolIds`).
    fn long_running_ids(&self, _calls: &[&FunctionCall]) -> Vec<String> {
        Vec::new()
    }

    /// Ids of the calls that are non-blocking: each runs on its own and is answered when it ends,
    /// while the model goes on; the blocking calls of a message are answered together.
    fn non_blocking_ids(&self, _calls: &[&FunctionCall]) -> Vec<String> {
        Vec::new()
    }

    /// Runs the calls of a function-call event. Returns the merged function-response event, or
    /// `None` when no call answers now. Streaming tools send later results through `to_model`.
    async fn call_tools(
        &self,
        call_event: Event,
        to_model: mpsc::Sender<LiveInput>,
    ) -> Option<Event>;

    /// Runs the calls as [`FlowHooks::call_tools`] does, each of them stopped (and left out of
    /// the event) once its token in `cancels` is cancelled. By default (hooks that cannot stop
    /// one call alone) the calls stop together once every one of them is cancelled.
    async fn call_tools_cancellable(
        &self,
        call_event: Event,
        to_model: mpsc::Sender<LiveInput>,
        cancels: HashMap<String, CancellationToken>,
    ) -> Option<Event> {
        if cancels.is_empty() {
            return self.call_tools(call_event, to_model).await;
        }
        let all_cancelled = async {
            for cancel in cancels.values() {
                cancel.cancelled().await;
            }
        };
        tokio::select! {
            event = self.call_tools(call_event, to_model) => event,
            () = all_cancelled => None,
        }
    }

    /// True when user content must be screened (there are before-model callbacks).
    fn screens_user(&self) -> bool {
        false
    }

    /// Screens user content before the model answers it.
    async fn screen_user(&self, _content: &Content) -> Screened {
        Screened::Proceed(None)
    }

    /// True when the model's answers must be screened (there are after-model callbacks).
    fn screens_model(&self) -> bool {
        false
    }

    /// Screens the model's answer so far.
    async fn screen_model(&self, _response: &LlmResponse) -> Screened {
        Screened::Proceed(None)
    }

    /// Copies a client request to the input streams of running streaming tools.
    fn fan_out(&self, _request: &LiveRequest) {}

    /// Stops the background tools of this flow (it is ending or handing off).
    async fn stop_tools(&self) {}

    /// True once a tool or callback asked to end the run.
    fn invocation_ended(&self) -> bool {
        false
    }
}

/// A callback's verdict on user content or a model answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Screened {
    /// Go on; the event (if any) commits the callbacks' state changes.
    Proceed(Option<Event>),
    /// Blocked: this event is the answer instead (it has `turnComplete`).
    Block(Event),
}

/// Hooks of an agent without tools or callbacks.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;

#[async_trait]
impl FlowHooks for NoHooks {
    async fn call_tools(
        &self,
        call_event: Event,
        _to_model: mpsc::Sender<LiveInput>,
    ) -> Option<Event> {
        tracing::warn!(
            calls = call_event.function_calls().len(),
            "the model called tools, but the agent has none"
        );
        None
    }
}
