//! Session store errors.

/// What went wrong in a session store.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A session with this id already exists.
    #[error("session {0} already exists")]
    AlreadyExists(String),
    /// No such session.
    #[error("session {0} not found")]
    NotFound(String),
    /// A bad argument (store URL, id).
    #[error("{0}")]
    InvalidArgument(String),
    /// The write's fence is stale: another run holds the session's lease now.
    #[error("session {0} is held by another run (lease lost)")]
    Fenced(String),
    /// The database failed.
    #[error("session store error: {0}")]
    Database(#[from] sqlx::Error),
    /// Stored data could not be (de)serialized.
    #[error("session data error: {0}")]
    Serde(#[from] serde_json::Error),
}

impl SessionError {
    /// ADK-style error code, usable as a metric label and as an event's `errorCode`.
    pub fn code(&self) -> &'static str {
        match self {
            SessionError::AlreadyExists(_) => "ALREADY_EXISTS",
            SessionError::NotFound(_) => "NOT_FOUND",
            SessionError::InvalidArgument(_) => "INVALID_ARGUMENT",
            SessionError::Fenced(_) => "ABORTED",
            SessionError::Database(_) | SessionError::Serde(_) => "INTERNAL",
        }
    }
}
