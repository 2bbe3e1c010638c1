//! `SequentialAgent`: runs its sub-agents one after another. In a live run each sub-agent gets a
//! `task_completed` tool and the next one starts when it is called; the last one ends the run.

use super::{Agent, Callbacks};

/// Runs sub-agents in order (ADK's `SequentialAgent`).
#[derive(Debug, Clone)]
pub struct SequentialAgent {
    /// The agent's name.
    pub name: String,
    /// What the agent does.
    pub description: String,
    /// The steps, in order.
    pub sub_agents: Vec<Agent>,
    /// Before/after-agent callbacks around the whole sequence.
    pub callbacks: Callbacks,
}

impl SequentialAgent {
    /// A sequence of sub-agents.
    pub fn new(name: impl Into<String>, sub_agents: Vec<Agent>) -> Self {
        SequentialAgent {
            name: name.into(),
            description: String::new(),
            sub_agents,
            callbacks: Callbacks::default(),
        }
    }

    /// The step after the sub-agent named `name`, if any.
    pub fn step_after(&self, name: &str) -> Option<&Agent> {
        let index = self.sub_agents.iter().position(|a| a.name() == name)?;
        self.sub_agents.get(index + 1)
    }
}
