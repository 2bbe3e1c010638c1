//! What tools and callbacks see of a run: the invocation (ids, committed state, artifacts) and a
//! per-step `Context` whose state writes and artifact saves become the actions of the step's event.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::latch::Latch;
use serde_json::{Map, Value};

use crate::artifact::{Artifact, ArtifactError, ArtifactScope, ArtifactService};
use crate::event::{Content, EventActions};
use crate::lock::Recover;

/// One run of the runner, shared by every agent, tool and callback in it (ADK's
/// `InvocationContext`, minus what only the flow needs).
#[derive(Debug)]
pub struct Invocation {
    /// `e-` + UUID.
    pub invocation_id: String,
    /// Application name.
    pub app_name: String,
    /// The session's owner.
    pub user_id: String,
    /// The session.
    pub session_id: String,
    /// Where tools and callbacks save artifacts.
    pub artifacts: Arc<dyn crate::artifact::ArtifactService>,
    /// The user message that started a turn-based run.
    pub user_content: Option<Content>,
    /// The verified claims of the client token the run was started with (none without one).
    pub caller_claims: Option<Arc<Map<String, Value>>>,
    /// The session state as committed so far in this run (`temp:` keys included).
    state: Mutex<Map<String, Value>>,
    /// Set by `end_invocation`: the run stops after the current step.
    ended: Latch,
}

impl Invocation {
    /// An invocation over a session whose committed state is `state`.
    pub fn new(
        invocation_id: String,
        scope: ArtifactScope<'_>,
        artifacts: Arc<dyn ArtifactService>,
        state: Map<String, Value>,
    ) -> Self {
        Invocation {
            invocation_id,
            app_name: scope.app_name.to_owned(),
            user_id: scope.user_id.to_owned(),
            session_id: scope.session_id.to_owned(),
            artifacts,
            user_content: None,
            caller_claims: None,
            state: Mutex::new(state),
            ended: Latch::new(),
        }
    }

    /// Records a committed state delta (the runner calls this after each commit).
    pub fn commit_state(&self, delta: &Map<String, Value>) {
        if !delta.is_empty() {
            self.lock_state()
                .extend(delta.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }

    /// The committed value of a state key.
    pub fn state(&self, key: &str) -> Option<Value> {
        self.lock_state().get(key).cloned()
    }

    /// Asks the run to stop after the current step (ADK's `end_invocation = True`).
    pub fn end(&self) {
        self.ended.fire();
    }

    /// True once `end` was called.
    pub fn is_ended(&self) -> bool {
        self.ended.is_fired()
    }

    /// The artifact scope of this run's session.
    pub fn scope(&self) -> ArtifactScope<'_> {
        ArtifactScope {
            app_name: &self.app_name,
            user_id: &self.user_id,
            session_id: &self.session_id,
        }
    }

    fn lock_state(&self) -> MutexGuard<'_, Map<String, Value>> {
        // A panic elsewhere while holding the lock leaves the map intact; keep using it.
        self.state.lock_or_recover()
    }
}

/// What a tool or callback gets: the run, the agent, and this step's pending actions.
///
/// Cheap to clone; clones share the pending actions, so writes made anywhere in the step land on
/// the step's event.
#[derive(Debug, Clone)]
pub struct Context {
    invocation: Arc<Invocation>,
    agent_name: String,
    function_call_id: Option<String>,
    actions: Arc<Mutex<EventActions>>,
}

impl Context {
    /// A context for a step of `agent_name` (a callback, or a tool call when `function_call_id` is set).
    pub fn new(
        invocation: Arc<Invocation>,
        agent_name: &str,
        function_call_id: Option<String>,
    ) -> Self {
        Context {
            invocation,
            agent_name: agent_name.to_owned(),
            function_call_id,
            actions: Arc::default(),
        }
    }

    /// The run this step belongs to.
    pub fn invocation(&self) -> &Invocation {
        &self.invocation
    }

    /// The run's invocation id.
    pub fn invocation_id(&self) -> &str {
        &self.invocation.invocation_id
    }

    /// The agent running this step.
    pub fn agent_name(&self) -> &str {
        &self.agent_name
    }

    /// The id of the function call being executed (tools only).
    pub fn function_call_id(&self) -> Option<&str> {
        self.function_call_id.as_deref()
    }

    /// Reads a state key: this step's own writes first, then the committed state.
    pub fn state(&self, key: &str) -> Option<Value> {
        if let Some(value) = self.lock_actions().state_delta.get(key) {
            return Some(value.clone());
        }
        self.invocation.state(key)
    }

    /// Writes a state key; it is committed as the `stateDelta` of this step's event.
    pub fn set_state(&self, key: impl Into<String>, value: Value) {
        self.lock_actions().state_delta.insert(key.into(), value);
    }

    /// Saves an artifact version and records it in this step's `artifactDelta`.
    pub async fn save_artifact(
        &self,
        filename: &str,
        artifact: Artifact,
    ) -> Result<u64, ArtifactError> {
        let version = self
            .invocation
            .artifacts
            .save(self.invocation.scope(), filename, artifact)
            .await?;
        self.lock_actions()
            .artifact_delta
            .insert(filename.to_owned(), Value::from(version));
        Ok(version)
    }

    /// Loads an artifact (the latest version when `version` is `None`).
    pub async fn load_artifact(
        &self,
        filename: &str,
        version: Option<u64>,
    ) -> Result<Option<Artifact>, ArtifactError> {
        self.invocation
            .artifacts
            .load(self.invocation.scope(), filename, version)
            .await
    }

    /// Lists the artifacts visible to this session.
    pub async fn list_artifacts(&self) -> Result<Vec<String>, ArtifactError> {
        self.invocation
            .artifacts
            .list_names(self.invocation.scope())
            .await
    }

    /// Hands the conversation to another agent after this step (the `transfer_to_agent` tool).
    pub fn transfer_to_agent(&self, agent_name: impl Into<String>) {
        self.lock_actions().transfer_to_agent = Some(agent_name.into());
    }

    /// Asks the model not to summarize this tool's result.
    pub fn skip_summarization(&self) {
        self.lock_actions().skip_summarization = Some(true);
    }

    /// Ends the whole run after this step.
    pub fn end_invocation(&self) {
        self.invocation.end();
    }

    /// Takes the actions recorded so far, leaving none.
    pub fn take_actions(&self) -> EventActions {
        std::mem::take(&mut *self.lock_actions())
    }

    /// True if this step recorded a state or artifact change.
    pub fn has_changes(&self) -> bool {
        let actions = self.lock_actions();
        !actions.state_delta.is_empty() || !actions.artifact_delta.is_empty()
    }

    fn lock_actions(&self) -> MutexGuard<'_, EventActions> {
        self.actions.lock_or_recover()
    }
}

/// Merges `next` into `into`: later state and artifact writes win; a transfer or escalation sticks.
pub fn merge_actions(into: &mut EventActions, next: EventActions) {
    into.state_delta.extend(next.state_delta);
    into.artifact_delta.extend(next.artifact_delta);
    if next.transfer_to_agent.is_some() {
        into.transfer_to_agent = next.transfer_to_agent;
    }
    if next.escalate.is_some() {
        into.escalate = next.escalate;
    }
    if next.skip_summarization.is_some() {
        into.skip_summarization = next.skip_summarization;
    }
}

/// An invocation of app `app`, user `u`, session `s` over in-memory artifacts, for unit tests.
#[cfg(test)]
pub(crate) fn test_invocation(state: Map<String, Value>) -> Arc<Invocation> {
    Arc::new(Invocation::new(
        "e-1".into(),
        ArtifactScope {
            app_name: "app",
            user_id: "u",
            session_id: "s",
        },
        Arc::new(crate::artifact::InMemoryArtifactService::default()),
        state,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn invocation() -> Arc<Invocation> {
        let mut state = Map::new();
        state.insert("count".into(), json!(1));
        test_invocation(state)
    }

    #[test]
    fn reads_see_the_steps_own_writes_before_they_are_committed() {
        let inv = invocation();
        let ctx = Context::new(inv.clone(), "agent", Some("call-1".into()));
        assert_eq!(ctx.state("count"), Some(json!(1)));
        ctx.set_state("count", json!(2));
        assert_eq!(ctx.state("count"), Some(json!(2)), "dirty read");
        assert_eq!(inv.state("count"), Some(json!(1)), "not committed yet");
        let other = Context::new(inv.clone(), "agent", None);
        assert_eq!(other.state("count"), Some(json!(1)));

        let actions = ctx.take_actions();
        assert_eq!(actions.state_delta.get("count"), Some(&json!(2)));
        inv.commit_state(&actions.state_delta);
        assert_eq!(other.state("count"), Some(json!(2)), "committed");
        assert!(!ctx.has_changes());
    }

    #[tokio::test]
    async fn artifact_saves_are_recorded_and_loadable() {
        let ctx = Context::new(invocation(), "agent", None);
        let artifact = Artifact {
            data: bytes::Bytes::from_static(b"hi"),
            mime_type: "text/plain".into(),
        };
        assert_eq!(
            ctx.save_artifact("note.txt", artifact.clone())
                .await
                .unwrap(),
            0
        );
        assert_eq!(
            ctx.save_artifact("note.txt", artifact.clone())
                .await
                .unwrap(),
            1
        );
        assert_eq!(
            ctx.load_artifact("note.txt", None).await.unwrap(),
            Some(artifact)
        );
        assert_eq!(
            ctx.take_actions().artifact_delta.get("note.txt"),
            Some(&json!(1))
        );
        assert_eq!(ctx.list_artifacts().await.unwrap(), vec!["note.txt"]);
    }

    #[test]
    fn end_invocation_is_seen_by_the_whole_run() {
        let inv = invocation();
        let ctx = Context::new(inv.clone(), "agent", None);
        assert!(!inv.is_ended());
        ctx.end_invocation();
        assert!(inv.is_ended());
    }
}
