//! Sessions and their state: the `SessionService` contract and its backends (in-memory, SQLite,
//! PostgreSQL).
//!
//! State keys follow ADK's prefixes: `app:` (shared by the app), `user:` (shared by one user's
//! sessions), `temp:` (never persisted), unprefixed (this session only).

mod batch;
mod error;
mod fence;
mod memory;
mod postgres;
mod sqlite;
pub mod state;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::event::Event;

pub use error::SessionError;
pub use fence::Fence;
pub use memory::InMemorySessionService;
pub use postgres::PostgresSessionService;
pub use sqlite::SqliteSessionService;

/// A conversation: its identity, merged state and committed events.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// Application name.
    pub app_name: String,
    /// Owner.
    pub user_id: String,
    /// Session id.
    pub id: String,
    /// Merged state: `app:` and `user:` keys with their prefixes, plus this session's keys.
    pub state: Map<String, Value>,
    /// Committed events, oldest first.
    pub events: Vec<Event>,
    /// Time of the last committed event (seconds since the epoch).
    pub last_update_time: f64,
    /// How this copy's writes are fenced: a leased run's token, checked by the store with each
    /// of its appends (see [`Fence`]).
    #[serde(skip)]
    pub fence: Fence,
}

/// Which events `get_session` returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GetSessionConfig {
    /// Only the most recent N events (0 = none).
    pub num_recent_events: Option<usize>,
    /// Only events with `timestamp >= after_timestamp`.
    pub after_timestamp: Option<f64>,
}

/// The id a new session gets: the one asked for (trimmed), or a fresh UUID.
pub fn session_id_or_new(session_id: Option<&str>) -> String {
    session_id
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

/// Stores sessions, their state and their events.
#[async_trait]
pub trait SessionService: Send + Sync + std::fmt::Debug {
    /// Creates a session; a missing id gets a fresh UUID. Fails with `AlreadyExists` on a duplicate.
    async fn create_session(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: Option<&str>,
        state: Map<String, Value>,
    ) -> Result<Session, SessionError>;

    /// Reads a session with its merged state and (filtered) events; `None` if it does not exist.
    async fn get_session(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
        config: &GetSessionConfig,
    ) -> Result<Option<Session>, SessionError>;

    /// Lists a user's sessions (state included, events left out), most recently updated first.
    async fn list_sessions(
        &self,
        app_name: &str,
        user_id: &str,
    ) -> Result<Vec<Session>, SessionError>;

    /// Deletes a session and its events. Deleting a missing session is not an error.
    async fn delete_session(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<(), SessionError>;

    /// Commits an event (ADK's `append_event`): partial events are returned untouched and not
    /// stored; `temp:` keys are applied to `session.state` but stripped from the stored delta; the
    /// delta is routed to app, user and session state; the event is appended to `session.events`.
    async fn append_event(
        &self,
        session: &mut Session,
        event: Event,
    ) -> Result<Event, SessionError>;

    /// Commits events of one session in their order, each as `append_event` would: one outcome
    /// per event, in the same order. A store may commit them together (a turn's end brings
    /// several at once); the caller's copy of the session sees them applied in order.
    async fn append_events(
        &self,
        session: &mut Session,
        events: Vec<Event>,
    ) -> Vec<Result<Event, SessionError>> {
        let mut outcomes = Vec::with_capacity(events.len());
        for event in events {
            outcomes.push(self.append_event(session, event).await);
        }
        outcomes
    }

    /// The model's latest session-resumption handle stored with the session (kept apart from
    /// its state: no client or agent sees it); `None` if there is none or no such session.
    /// A store that keeps none has the stored history replayed to the model instead.
    async fn resumption_handle(
        &self,
        _app_name: &str,
        _user_id: &str,
        _session_id: &str,
    ) -> Result<Option<String>, SessionError> {
        Ok(None)
    }

    /// Stores the model's latest resumption handle with the session, or clears it (`None`).
    /// Without the session nothing is stored, and that is not an error. A write under a fence
    /// the session no longer has fails with `Fenced`.
    async fn set_resumption_handle(
        &self,
        _app_name: &str,
        _user_id: &str,
        _session_id: &str,
        _handle: Option<&str>,
        _fence: &Fence,
    ) -> Result<(), SessionError> {
        Ok(())
    }

    /// Claims the session for a leased run's `fence` before the run reads it: from then on a
    /// write under an older token fails with `Fenced`. Fails with `Fenced` if a newer token has
    /// claimed it already, `NotFound` without the session. A store of one process has no other
    /// node to fence out, and this default claims nothing.
    async fn claim(
        &self,
        _app_name: &str,
        _user_id: &str,
        _session_id: &str,
        _fence: &Fence,
    ) -> Result<(), SessionError> {
        Ok(())
    }

    /// How many sessions a user has (for the per-user quota). This default, for a store without
    /// a count query, lists them.
    async fn count_sessions(&self, app_name: &str, user_id: &str) -> Result<usize, SessionError> {
        Ok(self.list_sessions(app_name, user_id).await?.len())
    }

    /// Checks the store is reachable (for `/readyz`).
    async fn ping(&self) -> Result<(), SessionError>;

    /// A page of a session's events, oldest first, with how many it has in all; `None` if the
    /// session does not exist. The stores here read only the page; this default, for a store
    /// without a paged query, reads every event and slices.
    async fn list_events(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
        offset: usize,
        limit: usize,
    ) -> Result<Option<EventPage>, SessionError> {
        let Some(session) = self
            .get_session(app_name, user_id, session_id, &GetSessionConfig::default())
            .await?
        else {
            return Ok(None);
        };
        let total = session.events.len();
        let events = session
            .events
            .into_iter()
            .skip(offset)
            .take(limit)
            .collect();
        Ok(Some(EventPage { events, total }))
    }

    /// Events read back from the store so far, in total (`livegate_session_events_read_total`):
    /// what shows that reads are bounded.
    fn events_read(&self) -> u64 {
        0
    }

    /// Checks the store can write (for `/readyz`): a tiny write that leaves nothing behind.
    async fn check_writable(&self) -> Result<(), SessionError> {
        self.ping().await
    }
}

/// A page of a session's events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventPage {
    /// The page, oldest first.
    pub events: Vec<Event>,
    /// Events the session has in all.
    pub total: usize,
}

/// True for a URL naming the PostgreSQL store.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Opens the session store a URL names: `memory:`, `sqlite://PATH` or `postgres://…`.
pub async fn open_session_service(
    url: &str,
) -> Result<std::sync::Arc<dyn SessionService>, SessionError> {
    if url == "memory:" || url == "memory://" {
        return Ok(std::sync::Arc::new(InMemorySessionService::default()));
    }
    if let Some(path) = url.strip_prefix("sqlite://") {
        return Ok(std::sync::Arc::new(SqliteSessionService::open(path).await?));
    }
    if is_postgres_url(url) {
        return Ok(std::sync::Arc::new(
            PostgresSessionService::open(url).await?,
        ));
    }
    // The URL may hold a password: name only its scheme.
    let scheme = url.split_once(':').map_or(url, |(scheme, _)| scheme);
    Err(SessionError::InvalidArgument(format!(
        "unsupported session store scheme {scheme:?} (expected memory:, sqlite://PATH or \
         postgres://…)"
    )))
}
