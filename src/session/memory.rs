//! In-memory session store: for tests and single-process runs that need no durability.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::state::{apply_committed, merge_state, prepare_append, split_delta, ScopedDelta};
use super::{EventPage, Fence, GetSessionConfig, Session, SessionError, SessionService};
use crate::event::{now_timestamp, Event};
use crate::lock::Recover;

/// One stored session: its own (unprefixed) state and its committed events.
#[derive(Debug, Default)]
struct Stored {
    state: Map<String, Value>,
    events: Vec<Event>,
    last_update_time: f64,
    resumption_handle: Option<String>,
}

type SessionKey = (String, String, String);

#[derive(Debug, Default)]
struct Inner {
    sessions: HashMap<SessionKey, Stored>,
    app_state: HashMap<String, Map<String, Value>>,
    user_state: HashMap<(String, String), Map<String, Value>>,
}

/// Sessions kept in memory (lost when the process ends).
#[derive(Debug, Default)]
pub struct InMemorySessionService {
    inner: Mutex<Inner>,
    /// Events copied out for readers.
    events_read: AtomicU64,
}

fn key(app: &str, user: &str, id: &str) -> SessionKey {
    (app.to_owned(), user.to_owned(), id.to_owned())
}

impl InMemorySessionService {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every mutation below completes before anything can panic, so the maps stay consistent
        // even if a holder panicked.
        self.inner.lock_or_recover()
    }
}

impl Inner {
    /// The session as callers see it: merged state, no events.
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
            fence: Fence::none(),
        }
    }

    /// Writes the app and user parts of a split delta; returns the session part.
    fn apply_scoped(&mut self, app: &str, user: &str, scoped: ScopedDelta) -> Map<String, Value> {
        if !scoped.app.is_empty() {
            self.app_state
                .entry(app.to_owned())
                .or_default()
                .extend(scoped.app);
        }
        if !scoped.user.is_empty() {
            self.user_state
                .entry((app.to_owned(), user.to_owned()))
                .or_default()
                .extend(scoped.user);
        }
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
        let mut inner = self.lock();
        let k = key(app_name, user_id, &id);
        if inner.sessions.contains_key(&k) {
            return Err(SessionError::AlreadyExists(id));
        }
        let session_state = inner.apply_scoped(app_name, user_id, split_delta(&state));
        let stored = Stored {
            state: session_state,
            events: Vec::new(),
            last_update_time: now_timestamp(),
            resumption_handle: None,
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
        let inner = self.lock();
        let Some(stored) = inner.sessions.get(&key(app_name, user_id, session_id)) else {
            return Ok(None);
        };
        let mut session = inner.view(app_name, user_id, session_id, stored);
        // Filter first, then keep the most recent, without cloning events that are dropped.
        let kept: Vec<&Event> = stored
            .events
            .iter()
            .filter(|e| config.after_timestamp.is_none_or(|t| e.timestamp >= t))
            .collect();
        let skip = config
            .num_recent_events
            .map_or(0, |n| kept.len().saturating_sub(n));
        session.events = kept[skip..].iter().map(|e| (*e).clone()).collect();
        drop(inner);
        self.count_read(session.events.len());
        Ok(Some(session))
    }

    async fn list_sessions(
        &self,
        app_name: &str,
        user_id: &str,
    ) -> Result<Vec<Session>, SessionError> {
        let inner = self.lock();
        let mut sessions: Vec<Session> = inner
            .sessions
            .iter()
            .filter(|((a, u, _), _)| a == app_name && u == user_id)
            .map(|((a, u, id), stored)| inner.view(a, u, id, stored))
            .collect();
        sessions.sort_by(|a, b| {
            b.last_update_time
                .total_cmp(&a.last_update_time)
                .then_with(|| a.id.cmp(&b.id))
        });
        Ok(sessions)
    }

    async fn delete_session(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<(), SessionError> {
        self.lock()
            .sessions
            .remove(&key(app_name, user_id, session_id));
        Ok(())
    }

    async fn append_event(
        &self,
        session: &mut Session,
        mut event: Event,
    ) -> Result<Event, SessionError> {
        let Some(full_delta) = prepare_append(&mut event) else {
            return Ok(event);
        };

        let mut inner = self.lock();
        let k = key(&session.app_name, &session.user_id, &session.id);
        match inner.sessions.get(&k) {
            None => return Err(SessionError::NotFound(session.id.clone())),
            // A re-delivery of an event already committed changes nothing.
            Some(stored) if stored.events.iter().any(|e| e.id == event.id) => return Ok(event),
            Some(_) => {}
        }
        let session_delta = inner.apply_scoped(
            &session.app_name,
            &session.user_id,
            split_delta(&event.actions.state_delta),
        );
        if let Some(stored) = inner.sessions.get_mut(&k) {
            stored.state.extend(session_delta);
            stored.events.push(event.clone());
            stored.last_update_time = event.timestamp;
        }
        drop(inner);

        apply_committed(session, full_delta, &event);
        Ok(event)
    }

    async fn resumption_handle(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
    ) -> Result<Option<String>, SessionError> {
        Ok(self
            .lock()
            .sessions
            .get(&key(app_name, user_id, session_id))
            .and_then(|stored| stored.resumption_handle.clone()))
    }

    async fn set_resumption_handle(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
        handle: Option<&str>,
        // One process: no other node to fence out.
        _fence: &Fence,
    ) -> Result<(), SessionError> {
        if let Some(stored) = self
            .lock()
            .sessions
            .get_mut(&key(app_name, user_id, session_id))
        {
            stored.resumption_handle = handle.map(str::to_owned);
        }
        Ok(())
    }

    async fn ping(&self) -> Result<(), SessionError> {
        Ok(())
    }

    async fn list_events(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: &str,
        offset: usize,
        limit: usize,
    ) -> Result<Option<EventPage>, SessionError> {
        let inner = self.lock();
        let Some(stored) = inner.sessions.get(&key(app_name, user_id, session_id)) else {
            return Ok(None);
        };
        let total = stored.events.len();
        let events: Vec<Event> = stored
            .events
            .iter()
            .skip(offset)
            .take(limit)
            .cloned()
            .collect();
        drop(inner);
        self.count_read(events.len());
        Ok(Some(EventPage { events, total }))
    }

    fn events_read(&self) -> u64 {
        self.events_read.load(Ordering::Relaxed)
    }
}

impl InMemorySessionService {
    fn count_read(&self, events: usize) {
        self.events_read
            .fetch_add(u64::try_from(events).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}
