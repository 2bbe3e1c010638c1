//! Filesystem artifact store (stub, being written).
#![allow(unused)]
use super::*;
/// Filesystem artifact store.
#[derive(Debug, Default)]
pub struct FileArtifactService {}
impl FileArtifactService {
    /// Opens (creating) the root folder.
    pub async fn open(_path: &str) -> Result<Self, ArtifactError> {
        Err(ArtifactError::InvalidArgument("fs not yet".into()))
    }
}
