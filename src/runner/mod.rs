//! The runner: ADK's `Runner::run_live`. Gets or creates the session, runs the agent's live flow,
//! and commits every event to the session before it is yielded (and before the flow resumes).

mod history;

use std::sync::Arc;

use futures::stream::BoxStream;
use futures::StreamExt;
use serde_json::Map;

pub use history::history_contents;

use crate::agent::LlmAgent;
use crate::artifact::ArtifactService;
use crate::event::{new_invocation_id, Event};
use crate::live::flow::{LiveFlow, RecordingTarget};
use crate::live::{LiveRequestReceiver, RunConfig};
use crate::session::{GetSessionConfig, Session, SessionError, SessionService};

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The session store failed.
    #[error(transparent)]
    Session(#[from] SessionError),
}

impl RunError {
    /// ADK-style error code.
    pub fn code(&self) -> &'static str {
        match self {
            RunError::Session(e) => e.code(),
        }
    }
}

/// A started live run: its invocation id and its events.
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

/// Runs an agent against sessions and artifacts (ADK's `Runner`).
#[derive(Debug, Clone)]
pub struct Runner {
    /// Application name (first segment of session and artifact keys).
    pub app_name: String,
    /// The root agent.
    pub agent: Arc<LlmAgent>,
    /// Session store.
    pub sessions: Arc<dyn SessionService>,
    /// Artifact store.
    pub artifacts: Arc<dyn ArtifactService>,
}

impl Runner {
    /// Starts a live run on a session (created if missing), fed by `requests`.
    pub async fn run_live(
        &self,
        user_id: &str,
        session_id: &str,
        requests: LiveRequestReceiver,
        run_config: RunConfig,
    ) -> Result<LiveRun, RunError> {
        let mut session = self.get_or_create_session(user_id, session_id).await?;
        let invocation_id = new_invocation_id();
        let agent = self.agent.clone();
        let history = history_contents(&session.events);
        let flow = LiveFlow {
            model: agent.model.clone(),
            connect_config: agent.connect_config(&run_config, history),
            target: RecordingTarget {
                artifacts: Some(self.artifacts.clone()),
                app_name: self.app_name.clone(),
                user_id: user_id.to_owned(),
                session_id: session_id.to_owned(),
                invocation_id: invocation_id.clone(),
                agent_name: agent.name.clone(),
            },
            run_config: run_config.clone(),
        };
        let sessions = self.sessions.clone();
        let custom_metadata = run_config.custom_metadata.clone();
        let agent_name = agent.name.clone();
        let inv = invocation_id.clone();
        let events = async_stream::stream! {
            let items = flow.run(requests);
            futures::pin_mut!(items);
            while let Some(item) = items.next().await {
                let mut event = item.event;
                if let Some(extra) = &custom_metadata {
                    let merged = event.custom_metadata.get_or_insert_with(Map::new);
                    for (k, v) in extra {
                        merged.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                }
                // Commit before yielding: the flow resumes only after this event is stored.
                if event.is_persisted_in_live() {
                    match sessions.append_event(&mut session, event.clone()).await {
                        Ok(stored) => event = stored,
                        Err(error) => {
                            tracing::error!(%error, invocation_id = inv, "committing an event failed");
                            yield Event::error(&inv, &agent_name, error.code(), format!("could not save event: {error}"));
                        }
                    }
                }
                if item.emit {
                    yield event;
                }
            }
        };
        Ok(LiveRun {
            invocation_id,
            events: events.boxed(),
        })
    }

    /// Reads a session, creating it (empty) when it does not exist.
    pub async fn get_or_create_session(
        &self,
        user_id: &str,
        session_id: &str,
    ) -> Result<Session, RunError> {
        let config = GetSessionConfig::default();
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
