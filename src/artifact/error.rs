//! Artifact store errors.

/// What went wrong in an artifact store.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// The filename is not allowed (path traversal, separators, empty).
    #[error("invalid artifact name {0:?}")]
    InvalidName(String),
    /// A bad argument (store URL, id).
    #[error("{0}")]
    InvalidArgument(String),
    /// The storage failed.
    #[error("artifact store I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The object store (bucket) failed or could not be reached.
    #[error("artifact object store error: {0}")]
    Store(#[source] Box<object_store::Error>),
    /// The store did not finish a save within its bound.
    #[error("the artifact store did not finish within {0:?}")]
    TimedOut(std::time::Duration),
}

impl ArtifactError {
    /// ADK-style error code, usable as a metric label and as an event's `errorCode`.
    pub fn code(&self) -> &'static str {
        match self {
            ArtifactError::InvalidName(_) | ArtifactError::InvalidArgument(_) => "INVALID_ARGUMENT",
            ArtifactError::Io(_) => "INTERNAL",
            ArtifactError::Store(_) | ArtifactError::TimedOut(_) => "UNAVAILABLE",
        }
    }
}
