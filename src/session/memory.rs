//! In-memory session store: for tests and single-process runs that need no durability.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::state::{merge_state, split_delta, strip_temp};
use super::{GetSessionConfig, Session, SessionError, SessionService};
use crate::event::{now_timestamp, Event};

#[derive(Debug, Default)]
struct Stored {
    state: Map<String, Value>,
    events: Vec<Event>,
    last_update_time: f64,
}

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<(String, String, String), Stored>,
    app_state: HashMap<String, Map<String, Value>>,
    user_state: HashMap<(String, String), Map<String, Value>>,
}

/// Sessions kept in memory (lost when the process ends).
#[derive(Debug, Default)]
pub struct InMemorySessionService {
    inner: Mutex<Inner>,
}

fn key(app: &str, user: &str, id: &str) -> (String, String, String) {
    (app.to_owned(), user.to_owned(), id.to_owned())
}

fn poisoned() -> SessionError {
    SessionError::InvalidArgument("session store lock poisoned".into())
}

impl Inner {
    fn view(&self, app: &str, user: &str, id: &str, stored: &Stored) -> Session {
        let empty = Map::new();
        let app_state = self.app_state.get(app).unwrap_or(&empty);
        let user_state = self
            .user_state
            .get(&(app.to_owned(), user.to_owned()))
            .unwrap_or(&empty);
        Session {
            app_name: app.to_owned(),
            user_id: user.to_owned(),
            id: id.to_owned(),
            state: merge_state(app_state, user_state, &stored.state),
            events: Vec::new(),
            last_update_time: stored.last_update_time,
        }
    }

    fn apply(&mut self, app: &str, user: &str, delta: &Map<String, Value>) -> Map<String, Value> {
        let scoped = split_delta(delta);
        self.app_state
            .entry(app.to_owned())
            .or_default()
            .extend(scoped.app);
        self.user_state
            .entry((app.to_owned(), user.to_owned()))
            .or_default()
            .extend(scoped.user);
        scoped.session
    }
}

#[async_trait]
impl SessionService for InMemorySessionService {
    async fn create_session(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: Option<&str>,
        state: Map<String, Value>,
    ) -> Result<Session, SessionError> {
        let id = super::session_id_or_new(session_id);
        let mut inner = self.inner.lock().map_err(|_| poisoned())?;
        let k = key(app_name, user_id, &id);
        if inner.sessions.contains_key(&k) {
            return Err(SessionError::AlreadyExists(id));
        }
        let session_state = inner.apply(app_name, user_id, &state);
        let stored = Stored {
            state: session_state,
            events: Vec::new(),
            last_update_time: now_timestamp(),
        };
        let view = inner.view(app_name, user_id, &id, &stored);
        inner.sessions.insert(k, stored);
        Ok(view)
    }

    async fn get_session(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
        config: &GetSessionConfig,
    ) -> Result<Option<Session>, SessionError> {
        let inner = self.inner.lock().map_err(|_| poisoned())?;
        let Some(stored) = inner.sessions.get(&key(app_name, user_id, session_id)) else {
            return Ok(None);
        };
        let mut session = inner.view(app_name, user_id, session_id, stored);
        let mut events: Vec<Event> = stored
            .events
            .iter()
            .filter(|e| config.after_timestamp.is_none_or(|t| e.timestamp >= t))
            .cloned()
            .collect();
        config.keep_recent(&mut events);
        session.events = events;
        Ok(Some(session))
    }

    async fn list_sessions(
        &self,
        app_name: &str,
        user_id: &str,
    ) -> Result<Vec<Session>, SessionError> {
        let inner = self.inner.lock().map_err(|_| poisoned())?;
        let mut sessions: Vec<Session> = inner
            .sessions
            .iter()
            .filter(|((a, u, _), _)| a == app_name && u == user_id)
            .map(|((a, u, id), stored)| inner.view(a, u, id, stored))
            .collect();
        sessions.sort_by(|a, b| b.last_update_time.total_cmp(&a.last_update_time));
        Ok(sessions)
    }

    async fn delete_session(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<(), SessionError> {
        let mut inner = self.inner.lock().map_err(|_| poisoned())?;
        inner.sessions.remove(&key(app_name, user_id, session_id));
        Ok(())
    }

    async fn append_event(
        &self,
        session: &mut Session,
        mut event: Event,
    ) -> Result<Event, SessionError> {
        if event.is_partial() {
            return Ok(event);
        }
        let mut inner = self.inner.lock().map_err(|_| poisoned())?;
        let k = key(&session.app_name, &session.user_id, &session.id);
        let Some(stored) = inner.sessions.get(&k) else {
            return Err(SessionError::NotFound(session.id.clone()));
        };
        if stored.events.iter().any(|e| e.id == event.id) {
            return Ok(event);
        }
        // temp: keys are visible to this invocation but never stored.
        for (k, v) in &event.actions.state_delta {
            session.state.insert(k.clone(), v.clone());
        }
        strip_temp(&mut event.actions.state_delta);
        let session_delta = inner.apply(
            &session.app_name,
            &session.user_id,
            &event.actions.state_delta,
        );
        if let Some(stored) = inner.sessions.get_mut(&k) {
            stored.state.extend(session_delta);
            stored.events.push(event.clone());
            stored.last_update_time = event.timestamp;
        }
        session.last_update_time = event.timestamp;
        session.events.push(event.clone());
        Ok(event)
    }

    async fn ping(&self) -> Result<(), SessionError> {
        Ok(())
    }
}
