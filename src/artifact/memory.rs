//! In-memory artifact store: for tests and single-process runs that need no durability.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use super::{
    is_user_scoped, validate_scope_id, Artifact, ArtifactError, ArtifactInfo, ArtifactScope,
    ArtifactService,
};
use crate::lock::Recover;

/// App, user, and the session (`None` for the user's own `user:` artifacts).
type ScopeKey = (String, String, Option<String>);

/// Artifacts kept in memory (lost when the process ends).
#[derive(Debug, Default)]
pub struct InMemoryArtifactService {
    /// Filename (with its `user:` prefix, if any) → versions, index = version number.
    artifacts: Mutex<HashMap<ScopeKey, BTreeMap<String, Vec<Artifact>>>>,
}

/// Where a filename lives: user-scoped names ignore the session.
fn scope_key(scope: ArtifactScope<'_>, filename: &str) -> ScopeKey {
    let session = (!is_user_scoped(filename)).then(|| scope.session_id.to_owned());
    (scope.app_name.to_owned(), scope.user_id.to_owned(), session)
}

impl InMemoryArtifactService {
    fn lock(&self) -> MutexGuard<'_, HashMap<ScopeKey, BTreeMap<String, Vec<Artifact>>>> {
        // No code path panics mid-update, so a poisoned map is still consistent.
        self.artifacts.lock_or_recover()
    }
}

#[async_trait]
impl ArtifactService for InMemoryArtifactService {
    async fn save(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        artifact: Artifact,
    ) -> Result<u64, ArtifactError> {
        scope.validate_for(filename)?;
        let mut artifacts = self.lock();
        let versions = artifacts
            .entry(scope_key(scope, filename))
            .or_default()
            .entry(filename.to_owned())
            .or_default();
        versions.push(artifact);
        Ok(versions.len() as u64 - 1)
    }

    async fn load(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        version: Option<u64>,
    ) -> Result<Option<Artifact>, ArtifactError> {
        scope.validate_for(filename)?;
        let artifacts = self.lock();
        let Some(versions) = artifacts
            .get(&scope_key(scope, filename))
            .and_then(|names| names.get(filename))
        else {
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

    async fn describe(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
    ) -> Result<Option<ArtifactInfo>, ArtifactError> {
        scope.validate_for(filename)?;
        let artifacts = self.lock();
        let Some(versions) = artifacts
            .get(&scope_key(scope, filename))
            .and_then(|names| names.get(filename))
        else {
            return Ok(None);
        };
        Ok(versions.last().map(|latest| ArtifactInfo {
            versions: (0..versions.len() as u64).collect(),
            mime_type: latest.mime_type.clone(),
            size: latest.data.len() as u64,
        }))
    }

    async fn list_names(&self, scope: ArtifactScope<'_>) -> Result<Vec<String>, ArtifactError> {
        validate_scope_id("app name", scope.app_name)?;
        validate_scope_id("user id", scope.user_id)?;
        validate_scope_id("session id", scope.session_id)?;
        let artifacts = self.lock();
        let (app, user) = (scope.app_name.to_owned(), scope.user_id.to_owned());
        let session_key = (app.clone(), user.clone(), Some(scope.session_id.to_owned()));
        let user_key = (app, user, None);
        let mut names: Vec<String> = [session_key, user_key]
            .iter()
            .filter_map(|k| artifacts.get(k))
            .flat_map(|names| names.keys().cloned())
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
        scope.validate_for(filename)?;
        let artifacts = self.lock();
        let count = artifacts
            .get(&scope_key(scope, filename))
            .and_then(|names| names.get(filename))
            .map_or(0, Vec::len);
        Ok((0..count as u64).collect())
    }

    async fn delete(&self, scope: ArtifactScope<'_>, filename: &str) -> Result<(), ArtifactError> {
        scope.validate_for(filename)?;
        let mut artifacts = self.lock();
        let key = scope_key(scope, filename);
        if let Some(names) = artifacts.get_mut(&key) {
            names.remove(filename);
            if names.is_empty() {
                artifacts.remove(&key);
            }
        }
        Ok(())
    }
}
