//! In-memory session store (stub, being written).
#![allow(unused)]
use super::*;
/// In-memory session store.
#[derive(Debug, Default)]
pub struct InMemorySessionService {}
#[async_trait]
impl SessionService for InMemorySessionService {
    async fn create_session(
        &self,
        app_name: &str,
        user_id: &str,
        session_id: Option<&str>,
        state: Map<String, Value>,
    ) -> Result<Session, SessionError> {
        Ok(Session {
            app_name: app_name.into(),
            user_id: user_id.into(),
            id: session_id.unwrap_or("x").into(),
            state,
            ..Session::default()
        })
    }
    async fn get_session(
        &self,
        _a: &str,
        _u: &str,
        _s: &str,
        _c: &GetSessionConfig,
    ) -> Result<Option<Session>, SessionError> {
        Ok(None)
    }
    async fn list_sessions(&self, _a: &str, _u: &str) -> Result<Vec<Session>, SessionError> {
        Ok(vec![])
    }
    async fn delete_session(&self, _a: &str, _u: &str, _s: &str) -> Result<(), SessionError> {
        Ok(())
    }
    async fn append_event(
        &self,
        session: &mut Session,
        event: Event,
    ) -> Result<Event, SessionError> {
        if !event.is_partial() {
            session.events.push(event.clone());
        }
        Ok(event)
    }
    async fn ping(&self) -> Result<(), SessionError> {
        Ok(())
    }
}
