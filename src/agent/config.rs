//! The agent file (`livegate serve --agent FILE`, TOML): an agent tree with instructions, built-in
//! tools, HTTP tools and sub-agents, for people who configure rather than write Rust.
//!
//! ```toml
//! name = "concierge"
//! instruction = "Route each question to the right specialist."
//! builtin_tools = ["get_current_time"]
//!
//! # Live settings of every run (root agent only): over the gateway's flags, under what clients
//! # may change (docs/PROTOCOL.md, "Setup message", lists the names).
//! [live]
//! voice = "Kore"
//! language = "en-GB"
//! silence_duration_ms = 700
//!
//! [[sub_agents]]
//! name = "orders"
//! description = "Answers questions about orders."
//!
//! [[sub_agents.http_tools]]
//! name = "lookup_order"
//! description = "Looks an order up by id."
//! url = "http://127.0.0.1:9000/orders"
//! timeout_ms = 3000
//! parameters = { type = "object", properties = { id = { type = "string" } }, required = ["id"] }
//! ```

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::builtin::{builtin_tool, BUILTIN_TOOLS};
use super::http_tool::http_tool;
use super::mcp::{McpConfig, McpToolset};
use super::tool::{resolve_mode, scheduling_key};
use super::{Agent, LlmAgent, SequentialAgent};
use crate::event::Scheduling;
use crate::live::settings::LiveSettings;
use crate::model::{Behavior, LiveModel, ModelError};

/// Resolves a model name to a backend.
pub type ModelResolver<'a> = &'a dyn Fn(&str) -> Result<Arc<dyn LiveModel>, ModelError>;

/// Default timeout of an HTTP tool.
const DEFAULT_HTTP_TIMEOUT_MS: u64 = 10_000;

/// Why an agent file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AgentConfigError {
    /// The file could not be read.
    #[error("cannot read agent file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for an agent.
    #[error("invalid agent file: {0}")]
    Parse(#[from] toml::de::Error),
    /// The agent tree is inconsistent.
    #[error("invalid agent: {0}")]
    Invalid(String),
    /// An agent's model is unknown.
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// How an agent runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentKind {
    /// A model-backed agent; with sub-agents it is a coordinator that transfers to them.
    #[default]
    #[serde(alias = "coordinator")]
    Llm,
    /// Runs its sub-agents one after another.
    Sequential,
}

/// An HTTP tool as declared in the file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpToolConfig {
    /// Function name the model calls.
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// JSON schema of the arguments.
    #[serde(default = "empty_object_schema")]
    pub parameters: Value,
    /// Where the arguments are POSTed.
    pub url: String,
    /// How long a call may take.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// `blocking` (the default: the model waits for the result) or `non_blocking` (the model
    /// goes on talking while the call runs).
    #[serde(default)]
    pub behavior: Option<Behavior>,
    /// For a non-blocking tool, when the model takes the result up: `interrupt`, `when_idle`
    /// (the default) or `silent`.
    #[serde(default, deserialize_with = "scheduling_key")]
    pub scheduling: Option<Scheduling>,
}

fn empty_object_schema() -> Value {
    serde_json::json!({ "type": "object", "properties": {} })
}

fn default_timeout_ms() -> u64 {
    DEFAULT_HTTP_TIMEOUT_MS
}

/// One agent of the tree, as declared in the file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The agent's name (the `author` of its events).
    pub name: String,
    /// `llm` (or `coordinator`) or `sequential`.
    #[serde(default)]
    pub kind: AgentKind,
    /// Model name; the gateway's `--model` when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// What the agent does (shown to agents that may transfer to it).
    #[serde(default)]
    pub description: String,
    /// System instruction.
    #[serde(default)]
    pub instruction: String,
    /// Built-in tools to enable: `get_current_time`, `calculate`.
    #[serde(default)]
    pub builtin_tools: Vec<String>,
    /// HTTP tools.
    #[serde(default)]
    pub http_tools: Vec<HttpToolConfig>,
    /// MCP servers whose tools this agent (and none of its sub-agents) may call.
    #[serde(default)]
    pub mcp: Vec<McpConfig>,
    /// Sub-agents (transfer targets of a coordinator, or the steps of a sequence).
    #[serde(default)]
    pub sub_agents: Vec<AgentConfig>,
    /// Live settings of the runs (the root agent's only): over the gateway's defaults, under
    /// what clients may change.
    #[serde(default)]
    pub live: Option<LiveSettings>,
}

impl AgentConfig {
    /// The built-in default: one assistant with both built-in tools.
    pub fn default_agent(instruction: &str) -> Self {
        AgentConfig {
            name: "assistant".into(),
            kind: AgentKind::Llm,
            model: None,
            description: "A helpful voice assistant.".into(),
            instruction: instruction.into(),
            builtin_tools: BUILTIN_TOOLS.iter().map(|t| (*t).to_owned()).collect(),
            http_tools: Vec::new(),
            mcp: Vec::new(),
            sub_agents: Vec::new(),
            live: None,
        }
    }

    /// Parses an agent file's text.
    pub fn from_toml(text: &str) -> Result<Self, AgentConfigError> {
        Ok(toml::from_str(text)?)
    }

    /// Reads and parses an agent file.
    pub fn load(path: &Path) -> Result<Self, AgentConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| AgentConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml(&text)
    }

    /// Builds the agent tree; `model_for` resolves model names (`default_model` when unset).
    pub fn build(
        &self,
        default_model: &str,
        model_for: ModelResolver<'_>,
    ) -> Result<Agent, AgentConfigError> {
        if let Some(sub) = self.sub_agents.iter().find(|a| a.has_live_settings()) {
            return Err(AgentConfigError::Invalid(format!(
                "agent {:?}: [live] settings belong to the root agent, which they apply to for the whole run",
                sub.name
            )));
        }
        let client = reqwest::Client::new();
        let agent = self.build_with(default_model, model_for, &client)?;
        agent
            .validate()
            .map_err(|e| AgentConfigError::Invalid(e.to_string()))?;
        Ok(agent)
    }

    /// True if this agent or one below it has a `[live]` table.
    fn has_live_settings(&self) -> bool {
        self.live.is_some() || self.sub_agents.iter().any(AgentConfig::has_live_settings)
    }

    fn build_with(
        &self,
        default_model: &str,
        model_for: ModelResolver<'_>,
        client: &reqwest::Client,
    ) -> Result<Agent, AgentConfigError> {
        let sub_agents = self
            .sub_agents
            .iter()
            .map(|a| a.build_with(default_model, model_for, client))
            .collect::<Result<Vec<_>, _>>()?;
        match self.kind {
            AgentKind::Sequential => {
                if !self.builtin_tools.is_empty()
                    || !self.http_tools.is_empty()
                    || !self.mcp.is_empty()
                {
                    return Err(AgentConfigError::Invalid(format!(
                        "sequential agent {:?} cannot have tools; give them to its sub-agents",
                        self.name
                    )));
                }
                let mut agent = SequentialAgent::new(&self.name, sub_agents);
                agent.description = self.description.clone();
                Ok(agent.into())
            }
            AgentKind::Llm => {
                let model = model_for(self.model.as_deref().unwrap_or(default_model))?;
                let mut agent = LlmAgent::new(&self.name, &self.instruction, model)
                    .with_description(&self.description);
                for name in &self.builtin_tools {
                    let tool = builtin_tool(name).ok_or_else(|| {
                        AgentConfigError::Invalid(format!(
                            "unknown built-in tool {name:?} (available: {}, get_keypad_digits)",
                            BUILTIN_TOOLS.join(", ")
                        ))
                    })?;
                    agent = agent.with_tool(tool);
                }
                for http in &self.http_tools {
                    if !http.url.starts_with("http://") && !http.url.starts_with("https://") {
                        return Err(AgentConfigError::Invalid(format!(
                            "HTTP tool {:?}: url must start with http:// or https://",
                            http.name
                        )));
                    }
                    let mode = resolve_mode(http.behavior, http.scheduling, None).map_err(|e| {
                        AgentConfigError::Invalid(format!("HTTP tool {:?}: {e}", http.name))
                    })?;
                    let mut tool = http_tool(
                        &http.name,
                        &http.description,
                        http.parameters.clone(),
                        http.url.clone(),
                        Duration::from_millis(http.timeout_ms.max(1)),
                        client.clone(),
                    );
                    if let Some(scheduling) = mode {
                        tool = tool.non_blocking(scheduling);
                    }
                    agent = agent.with_tool(tool);
                }
                for mcp in &self.mcp {
                    let toolset = McpToolset::start(mcp).map_err(AgentConfigError::Invalid)?;
                    agent = agent.with_toolset(toolset);
                }
                let names: Vec<&str> = agent.tools.iter().map(|t| t.name()).collect();
                if let Some(dup) = names
                    .iter()
                    .enumerate()
                    .find_map(|(i, n)| names[..i].contains(n).then_some(n))
                {
                    return Err(AgentConfigError::Invalid(format!(
                        "agent {:?} declares the tool {dup:?} twice",
                        self.name
                    )));
                }
                agent.sub_agents = sub_agents;
                Ok(agent.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::sim::{SimConfig, SimModel};

    fn sim(name: &str) -> Result<Arc<dyn LiveModel>, ModelError> {
        match name {
            "sim" => Ok(Arc::new(SimModel::new(SimConfig::default()))),
            other => Err(ModelError::UnknownModel(other.to_owned())),
        }
    }

    #[test]
    fn builds_a_coordinator_with_tools_and_a_sequence() {
        let config = AgentConfig::from_toml(
            r#"
            name = "root"
            instruction = "Route."
            builtin_tools = ["get_current_time", "calculate"]

            [[http_tools]]
            name = "lookup"
            url = "http://127.0.0.1:1/x"
            parameters = { type = "object", properties = { id = { type = "string" } } }

            [[sub_agents]]
            name = "steps"
            kind = "sequential"
            [[sub_agents.sub_agents]]
            name = "one"
            [[sub_agents.sub_agents]]
            name = "two"
            "#,
        )
        .unwrap();
        let agent = config.build("sim", &sim).unwrap();
        let Agent::Llm(root) = &agent else {
            panic!("root is an LlmAgent")
        };
        let tools: Vec<&str> = root.tools.iter().map(|t| t.name()).collect();
        assert_eq!(tools, ["get_current_time", "calculate", "lookup"]);
        assert_eq!(root.tools[2].behavior(), Behavior::Blocking);
        assert!(agent.in_sequence("two"));
        assert_eq!(agent.transfer_targets("root").len(), 1);
        assert!(agent.find("one").is_some());
    }

    #[test]
    fn http_tools_are_blocking_unless_the_file_says_non_blocking() {
        let config = AgentConfig::from_toml(
            r#"
            name = "root"
            [[http_tools]]
            name = "book"
            url = "http://127.0.0.1:1/book"
            behavior = "non_blocking"
            [[http_tools]]
            name = "notify"
            url = "http://127.0.0.1:1/notify"
            behavior = "non_blocking"
            scheduling = "silent"
            [[http_tools]]
            name = "alert"
            url = "http://127.0.0.1:1/alert"
            scheduling = "interrupt"
            [[http_tools]]
            name = "lookup"
            url = "http://127.0.0.1:1/lookup"
            behavior = "blocking"
            "#,
        )
        .unwrap();
        let agent = config.build("sim", &sim).unwrap();
        let Agent::Llm(root) = &agent else {
            panic!("root is an LlmAgent")
        };
        let modes: Vec<(Behavior, Option<Scheduling>)> = root
            .tools
            .iter()
            .map(|t| (t.behavior(), t.scheduling()))
            .collect();
        assert_eq!(
            modes,
            [
                (Behavior::NonBlocking, Some(Scheduling::WhenIdle)),
                (Behavior::NonBlocking, Some(Scheduling::Silent)),
                (Behavior::NonBlocking, Some(Scheduling::Interrupt)),
                (Behavior::Blocking, None),
            ]
        );
        assert!(root.tools[0].declaration().is_non_blocking());
        assert!(!root.tools[3].declaration().is_non_blocking());
    }

    #[test]
    fn rejects_what_cannot_run() {
        let cases = [
            (
                "name = \"a\"\nbuiltin_tools = [\"shell\"]",
                "unknown built-in tool",
            ),
            ("name = \"a\"\nmodel = \"gpt\"", "unknown model"),
            ("name = \"a\"\nkind = \"sequential\"", "no sub-agents"),
            ("name = \"a\"\n[[sub_agents]]\nname = \"a\"", "two agents"),
            ("name = \"a\"\ncolour = 1", "unknown field"),
            ("name = \"a\"\n[live]\nvoice = \"a b\"", "voice"),
            ("name = \"a\"\n[live]\nbarge = false", "barge"),
            (
                "name = \"a\"\n[[sub_agents]]\nname = \"b\"\n[sub_agents.live]\nvoice = \"Kore\"",
                "root agent",
            ),
            (
                "name = \"a\"\n[[http_tools]]\nname = \"t\"\nurl = \"file:///etc/passwd\"",
                "http://",
            ),
            (
                "name = \"a\"\n[[http_tools]]\nname = \"t\"\nurl = \"http://x\"\nbehavior = \"async\"",
                "line 5",
            ),
            (
                "name = \"a\"\n[[http_tools]]\nname = \"t\"\nurl = \"http://x\"\nbehavior = \"async\"",
                "expected `blocking` or `non_blocking`",
            ),
            (
                "name = \"a\"\n[[http_tools]]\nname = \"t\"\nurl = \"http://x\"\nscheduling = \"later\"",
                "unknown scheduling \"later\"",
            ),
            (
                "name = \"a\"\n[[http_tools]]\nname = \"t\"\nurl = \"http://x\"\nscheduling = \"later\"",
                "scheduling = \"later\"",
            ),
            (
                "name = \"a\"\n[[http_tools]]\nname = \"t\"\nurl = \"http://x\"\nbehavior = \"blocking\"\nscheduling = \"silent\"",
                "HTTP tool \"t\": scheduling = \"silent\" is for non-blocking tools",
            ),
        ];
        for (text, expected) in cases {
            let error = AgentConfig::from_toml(text)
                .and_then(|c| c.build("sim", &sim))
                .expect_err(text)
                .to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
