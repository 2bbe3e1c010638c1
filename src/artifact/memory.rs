//! In-memory artifact store: for tests and single-process runs that need no durability.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use super::{validate_filename, Artifact, ArtifactError, ArtifactScope, ArtifactService};

/// Artifacts kept in memory (lost when the process ends).
#[derive(Debug, Default)]
pub struct InMemoryArtifactService {
    artifacts: Mutex<HashMap<String, Vec<Artifact>>>,
}

/// The storage key: user-scoped names ignore the session.
fn key(scope: ArtifactScope<'_>, filename: &str) -> String {
    if filename.starts_with("user:") {
        format!("{}/{}/user/{filename}", scope.app_name, scope.user_id)
    } else {
        format!(
            "{}/{}/{}/{filename}",
            scope.app_name, scope.user_id, scope.session_id
        )
    }
}

fn poisoned() -> ArtifactError {
    ArtifactError::InvalidArgument("artifact store lock poisoned".into())
}

#[async_trait]
impl ArtifactService for InMemoryArtifactService {
    async fn save(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        artifact: Artifact,
    ) -> Result<u64, ArtifactError> {
        validate_filename(filename)?;
        let mut artifacts = self.artifacts.lock().map_err(|_| poisoned())?;
        let versions = artifacts.entry(key(scope, filename)).or_default();
        versions.push(artifact);
        Ok(versions.len() as u64 - 1)
    }

    async fn load(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        version: Option<u64>,
    ) -> Result<Option<Artifact>, ArtifactError> {
        validate_filename(filename)?;
        let artifacts = self.artifacts.lock().map_err(|_| poisoned())?;
        let Some(versions) = artifacts.get(&key(scope, filename)) else {
            return Ok(None);
        };
        Ok(match version {
            Some(v) => usize::try_from(v)
                .ok()
                .and_then(|v| versions.get(v))
                .cloned(),
            None => versions.last().cloned(),
        })
    }

    async fn list_names(&self, scope: ArtifactScope<'_>) -> Result<Vec<String>, ArtifactError> {
        let artifacts = self.artifacts.lock().map_err(|_| poisoned())?;
        let session_prefix = format!("{}/{}/{}/", scope.app_name, scope.user_id, scope.session_id);
        let user_prefix = format!("{}/{}/user/", scope.app_name, scope.user_id);
        let mut names: Vec<String> = artifacts
            .keys()
            .filter_map(|k| {
                k.strip_prefix(&session_prefix)
                    .filter(|n| !n.starts_with("user:"))
                    .or_else(|| {
                        k.strip_prefix(&user_prefix)
                            .filter(|n| n.starts_with("user:"))
                    })
            })
            .map(str::to_owned)
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    async fn list_versions(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
    ) -> Result<Vec<u64>, ArtifactError> {
        validate_filename(filename)?;
        let artifacts = self.artifacts.lock().map_err(|_| poisoned())?;
        let count = artifacts.get(&key(scope, filename)).map_or(0, Vec::len);
        Ok((0..count as u64).collect())
    }

    async fn delete(&self, scope: ArtifactScope<'_>, filename: &str) -> Result<(), ArtifactError> {
        validate_filename(filename)?;
        let mut artifacts = self.artifacts.lock().map_err(|_| poisoned())?;
        artifacts.remove(&key(scope, filename));
        Ok(())
    }
}
