//! Agents and what they use: `LlmAgent` (a model with an instruction, tools, callbacks and
//! sub-agents to transfer to), `SequentialAgent`, function tools, callbacks, and the `Context`
//! tools and callbacks work through.

pub mod builtin;
mod callbacks;
mod calls;
pub mod config;
mod context;
mod http_tool;
mod live_hooks;
mod llm;
pub mod mcp;
mod sequential;
mod tool;
mod toolset;
mod transfer;

use std::sync::Arc;

pub use crate::event::Scheduling;
pub use crate::model::Behavior;
pub use callbacks::Callbacks;
pub use calls::{call_tools, call_tools_cancellable, ToolRun};
pub use context::{merge_actions, Context, Invocation};
pub use http_tool::http_tool;
pub use live_hooks::AgentHooks;
pub use llm::LlmAgent;
pub use sequential::SequentialAgent;
pub use tool::{
    resolve_mode, scheduling_key, string_arg, FunctionTool, SchedulingOnBlocking, ToolBody,
    ToolError, ToolResult,
};
pub use toolset::{Toolset, ToolsetStats};
pub use transfer::{task_completed_tool, transfer_to_agent_tool, TRANSFER_TO_AGENT};

/// Why an agent tree cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTree {
    /// An empty name, or `user` (the author of the user's events).
    #[error("invalid agent name {0:?}")]
    Name(String),
    /// Two agents with one name (transfers name their target).
    #[error("two agents are named {0:?}")]
    SameName(String),
    /// A sequential agent with no steps.
    #[error("sequential agent {0:?} has no sub-agents")]
    EmptySequence(String),
}

/// An agent in a tree: a model-backed agent, or a workflow of sub-agents.
#[derive(Debug, Clone)]
pub enum Agent {
    /// A model-backed agent.
    Llm(Arc<LlmAgent>),
    /// Runs its sub-agents one after another.
    Sequential(Arc<SequentialAgent>),
}

impl From<LlmAgent> for Agent {
    fn from(agent: LlmAgent) -> Self {
        Agent::Llm(Arc::new(agent))
    }
}

impl From<SequentialAgent> for Agent {
    fn from(agent: SequentialAgent) -> Self {
        Agent::Sequential(Arc::new(agent))
    }
}

impl Agent {
    /// The agent's name (the `author` of its events).
    pub fn name(&self) -> &str {
        match self {
            Agent::Llm(a) => &a.name,
            Agent::Sequential(a) => &a.name,
        }
    }

    /// What the agent does.
    pub fn description(&self) -> &str {
        match self {
            Agent::Llm(a) => &a.description,
            Agent::Sequential(a) => &a.description,
        }
    }

    /// The agent's direct sub-agents.
    pub fn sub_agents(&self) -> &[Agent] {
        match self {
            Agent::Llm(a) => &a.sub_agents,
            Agent::Sequential(a) => &a.sub_agents,
        }
    }

    /// The agent's callbacks.
    pub fn callbacks(&self) -> &Callbacks {
        match self {
            Agent::Llm(a) => &a.callbacks,
            Agent::Sequential(a) => &a.callbacks,
        }
    }

    /// Every toolset of this tree, each once.
    pub fn toolsets(&self) -> Vec<Arc<dyn Toolset>> {
        let mut found: Vec<Arc<dyn Toolset>> = Vec::new();
        let mut stack = vec![self];
        while let Some(agent) = stack.pop() {
            if let Agent::Llm(llm) = agent {
                for toolset in &llm.toolsets {
                    if !found.iter().any(|t| Arc::ptr_eq(t, toolset)) {
                        found.push(toolset.clone());
                    }
                }
            }
            stack.extend(agent.sub_agents());
        }
        found
    }

    /// Finds an agent by name in this tree (this agent included).
    pub fn find(&self, name: &str) -> Option<&Agent> {
        if self.name() == name {
            return Some(self);
        }
        self.sub_agents().iter().find_map(|a| a.find(name))
    }

    /// The parent of the agent named `name` in this tree.
    pub fn parent_of(&self, name: &str) -> Option<&Agent> {
        if self.sub_agents().iter().any(|a| a.name() == name) {
            return Some(self);
        }
        self.sub_agents().iter().find_map(|a| a.parent_of(name))
    }

    /// The agents `name` may transfer to: its sub-agents and, when its parent is a model-backed
    /// agent, that parent (ADK's transfer targets, peers left out).
    pub fn transfer_targets(&self, name: &str) -> Vec<&Agent> {
        let Some(agent) = self.find(name) else {
            return Vec::new();
        };
        let Agent::Llm(_) = agent else {
            return Vec::new();
        };
        let mut targets: Vec<&Agent> = agent.sub_agents().iter().collect();
        if let Some(parent @ Agent::Llm(_)) = self.parent_of(name) {
            targets.push(parent);
        }
        targets
    }

    /// True when `name` runs as a step of a sequential agent (and so gets `task_completed`).
    pub fn in_sequence(&self, name: &str) -> bool {
        matches!(self.parent_of(name), Some(Agent::Sequential(_)))
    }

    /// Checks the tree: unique names, no empty sequential agents.
    pub fn validate(&self) -> Result<(), InvalidTree> {
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![self];
        while let Some(agent) = stack.pop() {
            if agent.name().trim().is_empty() || agent.name() == "user" {
                return Err(InvalidTree::Name(agent.name().to_owned()));
            }
            if !seen.insert(agent.name().to_owned()) {
                return Err(InvalidTree::SameName(agent.name().to_owned()));
            }
            if let Agent::Sequential(s) = agent {
                if s.sub_agents.is_empty() {
                    return Err(InvalidTree::EmptySequence(s.name.clone()));
                }
            }
            stack.extend(agent.sub_agents());
        }
        Ok(())
    }
}
