//! The runner: ADK's `Runner::run_live` and `Runner::run_async`. Gets the session, picks the agent
//! to run, drives the agent tree (callbacks, transfers, sequences), and commits every event to the
//! session before it is yielded (and before the agent resumes).

mod drive;
mod handles;
mod history;
mod traced;
pub mod usage;

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use serde_json::Map;
use tokio_util::task::TaskTracker;

pub use history::{
    bound_history, history_contents, HistoryLimit, DEFAULT_HISTORY_BYTES, DEFAULT_HISTORY_EVENTS,
};

use crate::agent::{Agent, Invocation};
use crate::artifact::{ArtifactScope, ArtifactService};
use crate::event::{new_invocation_id, Content, Event};
use crate::live::flow::DEFAULT_HANDOFF_DELAY;
use crate::live::{live_request_queue, LiveRequestReceiver, RunConfig};
use crate::model::Modality;
use crate::session::{Fence, Session, SessionError, SessionService};
use drive::{Drive, Mode};

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The session store failed.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// A turn-based run needs an existing session.
    #[error("session {0:?} not found")]
    SessionNotFound(String),
    /// The request cannot be run.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}

impl RunError {
    /// ADK-style error code.
    pub fn code(&self) -> &'static str {
        match self {
            RunError::Session(e) => e.code(),
            RunError::SessionNotFound(_) => "NOT_FOUND",
            RunError::InvalidRequest(_) => "INVALID_ARGUMENT",
        }
    }
}

/// A started run: its invocation id and its events.
pub struct LiveRun {
    /// The run's invocation id (`e-` + UUID).
    pub invocation_id: String,
    /// Every yielded event, already committed; ends when the run ends.
    pub events: BoxStream<'static, Event>,
}

impl std::fmt::Debug for LiveRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveRun")
            .field("invocation_id", &self.invocation_id)
            .finish_non_exhaustive()
    }
}

/// Runs an agent tree against sessions and artifacts (ADK's `Runner`).
#[derive(Debug, Clone)]
pub struct Runner {
    /// Application name (first segment of session and artifact keys).
    pub app_name: String,
    /// The root agent.
    pub agent: Agent,
    /// Session store.
    pub sessions: Arc<dyn SessionService>,
    /// Artifact store.
    pub artifacts: Arc<dyn ArtifactService>,
    /// How long a live agent keeps listening after a transfer or `task_completed` (ADK: 1 s).
    pub handoff_delay: Duration,
    /// How much of a session's history a run loads and replays to the model.
    pub history: HistoryLimit,
    /// What runs leave to finish beside them (resumption handles on their way to the store).
    background: TaskTracker,
}

impl Runner {
    /// A runner with ADK's hand-off delay.
    pub fn new(
        app_name: impl Into<String>,
        agent: impl Into<Agent>,
        sessions: Arc<dyn SessionService>,
        artifacts: Arc<dyn ArtifactService>,
    ) -> Self {
        Runner {
            app_name: app_name.into(),
            agent: agent.into(),
            sessions,
            artifacts,
            handoff_delay: DEFAULT_HANDOFF_DELAY,
            history: HistoryLimit::default(),
            background: TaskTracker::new(),
        }
    }

    /// Waits until what the runs so far left to finish beside them is done: the latest
    /// resumption handles stored, so that a node shutting down hands its sessions over with
    /// them. Work that starts meanwhile is waited for too.
    pub async fn settle(&self) {
        // Closing only lets `wait` end once nothing is left: tasks still start and are counted.
        self.background.close();
        self.background.wait().await;
    }

    /// Starts a live run on a session (created if missing), fed by `requests`. Every write the
    /// run makes carries `fence`, its session lease's token; the session is claimed with it
    /// before the run reads it.
    pub async fn run_live(
        &self,
        user_id: &str,
        session_id: &str,
        requests: LiveRequestReceiver,
        run_config: RunConfig,
        fence: Fence,
    ) -> Result<LiveRun, RunError> {
        self.claim_or_create(user_id, session_id, &fence).await?;
        let mut session = self.get_or_create_session(user_id, session_id).await?;
        session.fence = fence;
        let start = find_agent_to_run(&session, &self.agent);
        if start.name() != self.agent.name() {
            tracing::info!(agent = start.name(), "resuming the agent that last spoke");
        }
        let resume = match &run_config.session_resumption {
            Some(resumption) if resumption.handle.is_none() => self
                .sessions
                .resumption_handle(&self.app_name, user_id, session_id)
                .await
                .unwrap_or_else(|error| {
                    tracing::warn!(%error, "could not read the stored resumption handle");
                    None
                }),
            _ => None,
        };
        Ok(self.drive(
            new_invocation_id(),
            session,
            start,
            requests,
            run_config,
            Mode::Live,
            None,
            resume,
        ))
    }

    /// Runs one turn-based turn (ADK's `run_async`): commits `new_message` (with `state_delta`)
    /// as the user's event, then yields the agents' answers (partial text too when `streaming`). Needs an existing
    /// session.
    pub async fn run_async(
        &self,
        user_id: &str,
        session_id: &str,
        new_message: Content,
        state_delta: Map<String, serde_json::Value>,
        mut run_config: RunConfig,
        streaming: bool,
    ) -> Result<LiveRun, RunError> {
        if new_message.parts.is_empty() {
            return Err(RunError::InvalidRequest(
                "the new message has no parts".into(),
            ));
        }
        let mut session = self
            .sessions
            .get_session(&self.app_name, user_id, session_id, &self.history.read())
            .await?
            .ok_or_else(|| RunError::SessionNotFound(session_id.to_owned()))?;
        // A turn is written, not spoken, and leaves no recordings or live-session handles.
        run_config.response_modalities = Some(vec![Modality::Text]);
        run_config.input_audio_transcription = false;
        run_config.output_audio_transcription = false;
        run_config.save_live_blob = false;
        run_config.session_resumption = None;
        let start = find_agent_to_run(&session, &self.agent);

        let invocation_id = new_invocation_id();
        let mut message = new_message;
        message.role = Some("user".into());
        let mut user_event = Event::new(&invocation_id, "user");
        user_event.content = Some(message.clone());
        user_event.actions.state_delta = state_delta;
        self.sessions.append_event(&mut session, user_event).await?;
        // The model's live context no longer holds the whole conversation: the next live run
        // replays the history instead of resuming it.
        if let Err(error) = self
            .sessions
            .set_resumption_handle(&self.app_name, user_id, session_id, None, &Fence::none())
            .await
        {
            tracing::warn!(%error, "could not clear the stored resumption handle");
        }

        // The queue stays open (its sender lives in the drive) until the turn is over.
        let (queue, requests) = live_request_queue(4);
        let mut run = self.drive(
            invocation_id,
            session,
            start,
            requests,
            run_config,
            Mode::Turn { streaming },
            Some(message),
            None,
        );
        let events = run.events;
        run.events = async_stream::stream! {
            let _open = queue;
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                yield event;
            }
        }
        .boxed();
        Ok(run)
    }

    #[allow(clippy::too_many_arguments)]
    fn drive(
        &self,
        invocation_id: String,
        session: Session,
        start: Agent,
        requests: LiveRequestReceiver,
        run_config: RunConfig,
        mode: Mode,
        prompt: Option<Content>,
        resume: Option<String>,
    ) -> LiveRun {
        let mut invocation = Invocation::new(
            invocation_id.clone(),
            ArtifactScope {
                app_name: &session.app_name,
                user_id: &session.user_id,
                session_id: &session.id,
            },
            self.artifacts.clone(),
            session.state.clone(),
        );
        invocation.user_content = prompt.clone();
        invocation.caller_claims = run_config.caller_claims.clone();
        let span = traced::invocation_span(
            &invocation_id,
            start.name(),
            &session.id,
            mode == Mode::Live,
        );
        // The audio of this run only: the totals before it are the session's.
        let base_usage = usage::UsageTotals::of_state(&session.state);
        let run_config = RunConfig {
            audio: crate::live::AudioTally::default(),
            ..run_config
        };
        let drive = Drive {
            root: self.agent.clone(),
            sessions: self.sessions.clone(),
            invocation: Arc::new(invocation),
            run_config,
            mode,
            prompt,
            handoff_delay: self.handoff_delay,
            history: self.history,
            resume,
            handles: None,
            background: self.background.clone(),
            commits: traced::CommitTally::new(span.clone()),
            usage: std::sync::Mutex::new(base_usage),
        };
        let events = drive.run(session, start, requests);
        LiveRun {
            invocation_id,
            events: traced::InSpan::new(events, span).boxed(),
        }
    }

    /// Claims the session for `fence` (nothing for an unfenced run), creating it first when it
    /// does not exist.
    async fn claim_or_create(
        &self,
        user_id: &str,
        session_id: &str,
        fence: &Fence,
    ) -> Result<(), RunError> {
        if fence.epoch().is_none() {
            return Ok(());
        }
        let claimed = self
            .sessions
            .claim(&self.app_name, user_id, session_id, fence)
            .await;
        if !matches!(claimed, Err(SessionError::NotFound(_))) {
            return Ok(claimed?);
        }
        match self
            .sessions
            .create_session(&self.app_name, user_id, Some(session_id), Map::new())
            .await
        {
            Ok(_) | Err(SessionError::AlreadyExists(_)) => {}
            Err(error) => return Err(error.into()),
        }
        Ok(self
            .sessions
            .claim(&self.app_name, user_id, session_id, fence)
            .await?)
    }

    /// Reads a session, creating it (empty) when it does not exist.
    pub async fn get_or_create_session(
        &self,
        user_id: &str,
        session_id: &str,
    ) -> Result<Session, RunError> {
        let config = self.history.read();
        if let Some(session) = self
            .sessions
            .get_session(&self.app_name, user_id, session_id, &config)
            .await?
        {
            return Ok(session);
        }
        match self
            .sessions
            .create_session(&self.app_name, user_id, Some(session_id), Map::new())
            .await
        {
            Ok(session) => Ok(session),
            // Another connection created it in between: read theirs.
            Err(SessionError::AlreadyExists(_)) => self
                .sessions
                .get_session(&self.app_name, user_id, session_id, &config)
                .await?
                .ok_or_else(|| RunError::Session(SessionError::NotFound(session_id.to_owned()))),
            Err(error) => Err(error.into()),
        }
    }
}

/// The agent a run starts with (ADK's `_find_agent_to_run`): the agent that last spoke, if the
/// conversation can be handed back to it (a model-backed agent whose ancestors all are), else the
/// root.
pub fn find_agent_to_run(session: &Session, root: &Agent) -> Agent {
    for event in session.events.iter().rev() {
        if event.author == "user" {
            continue;
        }
        if event.author == root.name() {
            return root.clone();
        }
        if let Some(agent) = root.find(&event.author) {
            if transferable(root, agent.name()) {
                return agent.clone();
            }
        }
    }
    root.clone()
}

/// True when `name` and every agent above it are model-backed (so a run may start there).
fn transferable(root: &Agent, name: &str) -> bool {
    let mut current = name.to_owned();
    loop {
        let Some(agent) = root.find(&current) else {
            return false;
        };
        if !matches!(agent, Agent::Llm(_)) {
            return false;
        }
        match root.parent_of(&current) {
            Some(parent) => current = parent.name().to_owned(),
            None => return true,
        }
    }
}
