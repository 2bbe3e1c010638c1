//! In-memory artifact store (stub, being written).
#![allow(unused)]
use super::*;
/// In-memory artifact store.
#[derive(Debug, Default)]
pub struct InMemoryArtifactService {}
#[async_trait]
impl ArtifactService for InMemoryArtifactService {
    async fn save(
        &self,
        _s: ArtifactScope<'_>,
        _f: &str,
        _a: Artifact,
    ) -> Result<u64, ArtifactError> {
        Ok(0)
    }
    async fn load(
        &self,
        _s: ArtifactScope<'_>,
        _f: &str,
        _v: Option<u64>,
    ) -> Result<Option<Artifact>, ArtifactError> {
        Ok(None)
    }
    async fn list_names(&self, _s: ArtifactScope<'_>) -> Result<Vec<String>, ArtifactError> {
        Ok(vec![])
    }
    async fn list_versions(
        &self,
        _s: ArtifactScope<'_>,
        _f: &str,
    ) -> Result<Vec<u64>, ArtifactError> {
        Ok(vec![])
    }
    async fn delete(&self, _s: ArtifactScope<'_>, _f: &str) -> Result<(), ArtifactError> {
        Ok(())
    }
}
