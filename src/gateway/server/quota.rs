//! Per-user quotas on what clients keep: how many sessions a client token's user may have
//! stored, and how many bytes of state a client may give a session. The operator's own servers
//! (API keys) are not held to them, and without authentication they are off by default (anyone
//! may name any user); live sessions per user are a limit of their own (`limits`).

use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use crate::gateway::auth::Principal;
use crate::gateway::ids::PathId;
use crate::gateway::server::limits::{LimitCounters, Refused};
use crate::runner::Runner;
use crate::session::{GetSessionConfig, SessionError};

/// Why a client may not keep more.
#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    /// A quota is reached (counted as a limit refusal).
    #[error("{}", .0.label())]
    Over(Refused),
    /// The session store could not say.
    #[error(transparent)]
    Store(#[from] SessionError),
}

impl IntoResponse for QuotaError {
    fn into_response(self) -> Response {
        match self {
            QuotaError::Over(refused) => refused.response(),
            QuotaError::Store(error) => {
                tracing::error!(%error, "session store failed");
                crate::gateway::http::error::error(
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    error.to_string(),
                )
            }
        }
    }
}

/// What a client token's user may keep (0 turns a quota off).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quotas {
    /// Most sessions the user may have stored.
    pub stored_sessions: usize,
    /// Most bytes of state (as JSON, `temp:` keys aside) a client may give a session.
    pub state_bytes: usize,
}

impl Quotas {
    /// May `principal` reach `user`'s session `session`, which a live run creates if it does not
    /// exist yet?
    pub async fn admit_session(
        &self,
        runner: &Runner,
        counters: &LimitCounters,
        principal: &Principal,
        user: &PathId,
        session: &PathId,
    ) -> Result<(), QuotaError> {
        if self.stored_sessions == 0 || !is_client(principal) {
            return Ok(());
        }
        let config = GetSessionConfig {
            num_recent_events: Some(0),
            after_timestamp: None,
        };
        let existing = runner
            .sessions
            .get_session(&runner.app_name, user.as_str(), session.as_str(), &config)
            .await?;
        if existing.is_some() {
            return Ok(());
        }
        self.admit_new_session(runner, counters, principal, user.as_str())
            .await
    }

    /// May `principal` create one more session for `user`?
    pub async fn admit_new_session(
        &self,
        runner: &Runner,
        counters: &LimitCounters,
        principal: &Principal,
        user: &str,
    ) -> Result<(), QuotaError> {
        if self.stored_sessions == 0 || !is_client(principal) {
            return Ok(());
        }
        let stored = runner
            .sessions
            .count_sessions(&runner.app_name, user)
            .await?;
        if stored >= self.stored_sessions {
            return Err(over(counters, Refused::StoredSessions));
        }
        Ok(())
    }

    /// May `principal` give a session whose state is `current` the changes `delta`?
    pub fn check_state(
        &self,
        counters: &LimitCounters,
        principal: &Principal,
        current: &Map<String, Value>,
        delta: &Map<String, Value>,
    ) -> Result<(), QuotaError> {
        if self.state_bytes == 0 || !is_client(principal) || delta.is_empty() {
            return Ok(());
        }
        let mut state = current.clone();
        for (key, value) in delta.iter().filter(|(k, _)| !k.starts_with("temp:")) {
            state.insert(key.clone(), value.clone());
        }
        let size = serde_json::to_vec(&state).map_or(usize::MAX, |json| json.len());
        if size > self.state_bytes {
            return Err(over(counters, Refused::StateBytes));
        }
        Ok(())
    }
}

fn is_client(principal: &Principal) -> bool {
    matches!(principal, Principal::Client(_))
}

fn over(counters: &LimitCounters, refused: Refused) -> QuotaError {
    counters.refused(refused);
    QuotaError::Over(refused)
}
