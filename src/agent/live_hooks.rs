//! An `LlmAgent` plugged into a live flow: its tools run on the model's calls, its before-model
//! callbacks screen user content, its after-model callbacks screen the answers.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::calls::{call_tools_cancellable, BackgroundTools, ToolRun};
use super::context::{Context, Invocation};
use super::{FunctionTool, LlmAgent};
use crate::event::{Content, Event, FunctionCall};
use crate::live::flow::{FlowHooks, Screened};
use crate::live::LiveRequest;
use crate::model::{LiveInput, LlmRequest, LlmResponse};

/// The flow hooks of one agent's live flow.
#[derive(Debug)]
pub struct AgentHooks {
    invocation: Arc<Invocation>,
    agent: Arc<LlmAgent>,
    tools: Vec<FunctionTool>,
    background: BackgroundTools,
}

impl AgentHooks {
    /// Hooks for `agent` in `invocation`, with the tools of this run (its own plus the tree's).
    pub fn new(
        invocation: Arc<Invocation>,
        agent: Arc<LlmAgent>,
        tools: Vec<FunctionTool>,
    ) -> Self {
        AgentHooks {
            invocation,
            agent,
            tools,
            background: BackgroundTools::default(),
        }
    }

    fn context(&self) -> Context {
        Context::new(self.invocation.clone(), &self.agent.name, None)
    }

    /// The verdict of a callback chain that ran in `ctx` and returned `response`.
    fn verdict(&self, ctx: &Context, response: Option<LlmResponse>) -> Screened {
        match response {
            Some(response) => {
                let mut event = Event::new(&self.invocation.invocation_id, &self.agent.name);
                event.content = response.content;
                event.output_transcription = response.output_transcription;
                event.turn_complete = Some(true);
                event.actions = ctx.take_actions();
                Screened::Block(event)
            }
            None if ctx.has_changes() => {
                let mut event = Event::new(&self.invocation.invocation_id, &self.agent.name);
                event.actions = ctx.take_actions();
                Screened::Proceed(Some(event))
            }
            None => Screened::Proceed(None),
        }
    }
}

#[async_trait]
impl FlowHooks for AgentHooks {
    /// Long-running and non-blocking tools' calls: the model does not wait for either.
    fn long_running_ids(&self, calls: &[&FunctionCall]) -> Vec<String> {
        let mut ids: Vec<String> = calls
            .iter()
            .filter(|call| {
                self.tools.iter().any(|t| {
                    t.name() == call.name && (t.is_long_running() || t.scheduling().is_some())
                })
            })
            .filter_map(|call| call.id.clone())
            .collect();
        ids.sort();
        ids
    }

    fn non_blocking_ids(&self, calls: &[&FunctionCall]) -> Vec<String> {
        calls
            .iter()
            .filter(|call| {
                self.tools
                    .iter()
                    .any(|t| t.name() == call.name && t.scheduling().is_some())
            })
            .filter_map(|call| call.id.clone())
            .collect()
    }

    async fn call_tools(
        &self,
        call_event: Event,
        to_model: mpsc::Sender<LiveInput>,
    ) -> Option<Event> {
        self.call_tools_cancellable(call_event, to_model, HashMap::new())
            .await
    }

    async fn call_tools_cancellable(
        &self,
        call_event: Event,
        to_model: mpsc::Sender<LiveInput>,
        cancels: HashMap<String, CancellationToken>,
    ) -> Option<Event> {
        let calls: Vec<FunctionCall> = call_event.function_calls().into_iter().cloned().collect();
        let run = ToolRun {
            invocation: &self.invocation,
            agent_name: &self.agent.name,
            tools: &self.tools,
            callbacks: &self.agent.callbacks,
            background: Some((&self.background, &to_model)),
        };
        let mut event = call_tools_cancellable(run, &calls, &cancels).await?;
        event.live_session_id = call_event.live_session_id;
        Some(event)
    }

    fn screens_user(&self) -> bool {
        self.agent.callbacks.has_before_model()
    }

    async fn screen_user(&self, content: &Content) -> Screened {
        let ctx = self.context();
        let request = LlmRequest {
            model: self.agent.model.name().to_owned(),
            system_instruction: Some(self.agent.instruction.clone()),
            contents: vec![content.clone()],
        };
        let response = self.agent.callbacks.run_before_model(&ctx, &request).await;
        self.verdict(&ctx, response)
    }

    fn screens_model(&self) -> bool {
        self.agent.callbacks.has_after_model()
    }

    async fn screen_model(&self, response: &LlmResponse) -> Screened {
        let ctx = self.context();
        let replaced = self.agent.callbacks.run_after_model(&ctx, response).await;
        self.verdict(&ctx, replaced)
    }

    fn fan_out(&self, request: &LiveRequest) {
        if !self.background.is_empty() {
            self.background.fan_out(request);
        }
    }

    async fn stop_tools(&self) {
        let stopped = self.background.stop_all();
        if stopped > 0 {
            tracing::debug!(stopped, agent = self.agent.name, "stopped streaming tools");
        }
    }

    fn invocation_ended(&self) -> bool {
        self.invocation.is_ended()
    }
}
