//! `LlmAgent`: a model, an instruction, tools, callbacks and sub-agents it can transfer to.

use std::sync::Arc;

use super::toolset::Toolset;
use super::transfer::{task_completed_tool, transfer_to_agent_tool};
use super::{Agent, Callbacks, FunctionTool};
use crate::event::Content;
use crate::live::RunConfig;
use crate::model::{LiveConnectConfig, LiveModel};

/// An agent backed by a live model (ADK's `LlmAgent`).
#[derive(Debug, Clone)]
pub struct LlmAgent {
    /// The agent's name; the `author` of its events.
    pub name: String,
    /// What the agent does (shown to other agents).
    pub description: String,
    /// The system instruction.
    pub instruction: String,
    /// The live model it talks to.
    pub model: Arc<dyn LiveModel>,
    /// Tools the model may call.
    pub tools: Vec<FunctionTool>,
    /// Toolsets whose tools the model may call too, as they are when a run connects.
    pub toolsets: Vec<Arc<dyn Toolset>>,
    /// Agents it may transfer the conversation to.
    pub sub_agents: Vec<Agent>,
    /// Its callbacks.
    pub callbacks: Callbacks,
}

impl LlmAgent {
    /// An agent with a name, an instruction and a model.
    pub fn new(
        name: impl Into<String>,
        instruction: impl Into<String>,
        model: Arc<dyn LiveModel>,
    ) -> Self {
        LlmAgent {
            name: name.into(),
            description: String::new(),
            instruction: instruction.into(),
            model,
            tools: Vec::new(),
            toolsets: Vec::new(),
            sub_agents: Vec::new(),
            callbacks: Callbacks::default(),
        }
    }

    /// Sets the description.
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Adds a tool.
    pub fn with_tool(mut self, tool: FunctionTool) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds a toolset (an MCP server's tools, say).
    pub fn with_toolset(mut self, toolset: Arc<dyn Toolset>) -> Self {
        self.toolsets.push(toolset);
        self
    }

    /// Adds a sub-agent to transfer to.
    pub fn with_sub_agent(mut self, agent: impl Into<Agent>) -> Self {
        self.sub_agents.push(agent.into());
        self
    }

    /// Sets the callbacks.
    pub fn with_callbacks(mut self, callbacks: Callbacks) -> Self {
        self.callbacks = callbacks;
        self
    }

    /// The tools of a run of this agent inside `root`'s tree: its own, its toolsets' as they are
    /// now (a name already taken is left out), plus `transfer_to_agent` when it has transfer
    /// targets and `task_completed` when it is a step of a sequence.
    pub fn tools_in(&self, root: &Agent) -> Vec<FunctionTool> {
        let mut tools = self.tools.clone();
        for toolset in &self.toolsets {
            for tool in toolset.tools() {
                if tools.iter().any(|t| t.name() == tool.name()) {
                    tracing::debug!(
                        toolset = toolset.name(),
                        tool = tool.name(),
                        "a tool of that name is already declared; left out"
                    );
                    continue;
                }
                tools.push(tool);
            }
        }
        let targets = root.transfer_targets(&self.name);
        if !targets.is_empty() {
            let names: Vec<&str> = targets.iter().map(|a| a.name()).collect();
            tools.push(transfer_to_agent_tool(&names));
        }
        if root.in_sequence(&self.name) {
            tools.push(task_completed_tool());
        }
        tools
    }

    /// The system instruction as ADK builds it: the instruction, the agent's identity, and how to
    /// transfer or signal completion when the tree calls for it.
    pub fn system_instruction_in(&self, root: &Agent) -> String {
        let mut text = self.instruction.clone();
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(&format!(
            "You are an agent. Your internal name is \"{}\".",
            self.name
        ));
        if !self.description.is_empty() {
            text.push_str(&format!(
                " The description about you is \"{}\".",
                self.description
            ));
        }
        let targets = root.transfer_targets(&self.name);
        if !targets.is_empty() {
            text.push_str("\n\nYou have a list of other agents to transfer to:\n");
            for target in &targets {
                text.push_str(&format!(
                    "\nAgent name: {}\nAgent description: {}\n",
                    target.name(),
                    target.description()
                ));
            }
            text.push_str(
                "\nIf another agent is better for answering the question according to its \
                 description, call `transfer_to_agent` function to transfer the question to that \
                 agent. When transferring, do not generate any text other than the function call.",
            );
        }
        if root.in_sequence(&self.name) {
            text.push_str(
                "\n\nIf you finished the user's request according to its description, call the \
                 task_completed function to exit so the next agents can take over. When calling \
                 this function, do not generate any text other than the function call.",
            );
        }
        text
    }

    /// The connect config for a live run of this agent inside `root`'s tree, declaring `tools`
    /// (from [`LlmAgent::tools_in`]).
    pub fn connect_config(
        &self,
        root: &Agent,
        tools: &[FunctionTool],
        run_config: &RunConfig,
        history: Vec<Content>,
    ) -> LiveConnectConfig {
        LiveConnectConfig {
            model: self.model.name().to_owned(),
            system_instruction: Some(self.system_instruction_in(root)),
            tools: tools.iter().map(|t| t.declaration().clone()).collect(),
            response_modalities: run_config.live_modalities(),
            speech_config: run_config.speech_config.clone(),
            input_audio_transcription: run_config.input_audio_transcription,
            output_audio_transcription: run_config.output_audio_transcription,
            realtime_input_config: run_config.realtime_input_config.clone(),
            session_resumption: run_config.session_resumption.clone(),
            context_window_compression: run_config.context_window_compression.clone(),
            proactivity: run_config.proactivity.clone(),
            enable_affective_dialog: run_config.enable_affective_dialog,
            history,
            playout: run_config.playout.clone(),
        }
    }
}
