//! SQLite session store (stub, being written).
#![allow(unused)]
use super::*;
/// SQLite session store.
#[derive(Debug, Default)]
pub struct SqliteSessionService {}
impl SqliteSessionService {
    /// Opens or creates the database file.
    pub async fn open(_path: &str) -> Result<Self, SessionError> {
        Err(SessionError::InvalidArgument("sqlite not yet".into()))
    }
}
