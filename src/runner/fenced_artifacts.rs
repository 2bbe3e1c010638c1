//! The artifacts of a leased run, fenced like its events: before each write (a recording, a
//! tool's artifact, a deletion) the run's fencing token is checked against the session row, so a
//! run that lost its lease (a node paused past its TTL and resumed) claims no version in the
//! bucket after the session's new owner has taken it.
//!
//! A bucket has no statement to share with the session row, so the check comes just before the
//! write rather than in it: a run whose lease is taken in the milliseconds between the two can
//! still save one version, which no event of the session's history then refers to (the event
//! naming it is itself fenced).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::artifact::{Artifact, ArtifactError, ArtifactInfo, ArtifactScope, ArtifactService};
use crate::artifact::{SpoolDir, SpoolFile};
use crate::session::{Fence, SessionError, SessionService};

/// An artifact store whose writes first check a run's fence.
#[derive(Debug)]
pub(super) struct FencedArtifacts {
    inner: Arc<dyn ArtifactService>,
    sessions: Arc<dyn SessionService>,
    app_name: String,
    user_id: String,
    session_id: String,
    fence: Fence,
}

impl FencedArtifacts {
    /// `inner` as `fence` may write it in this session; `inner` itself for an unfenced run.
    pub(super) fn wrap(
        inner: Arc<dyn ArtifactService>,
        sessions: Arc<dyn SessionService>,
        scope: ArtifactScope<'_>,
        fence: &Fence,
    ) -> Arc<dyn ArtifactService> {
        if fence.epoch().is_none() {
            return inner;
        }
        Arc::new(FencedArtifacts {
            inner,
            sessions,
            app_name: scope.app_name.to_owned(),
            user_id: scope.user_id.to_owned(),
            session_id: scope.session_id.to_owned(),
            fence: fence.clone(),
        })
    }

    /// Ok while the session row still carries this run's token. A refusal fires the fence's
    /// latch, which ends the run, as a refused event does. `LeaseUnknown` when the session
    /// store cannot say.
    async fn check(&self) -> Result<(), ArtifactError> {
        // A claim with the run's own token changes nothing, and fails once a newer one is there.
        let claimed = self
            .sessions
            .claim(&self.app_name, &self.user_id, &self.session_id, &self.fence)
            .await;
        match claimed {
            Ok(()) => Ok(()),
            Err(SessionError::Fenced(_)) => {
                self.fence.refuse();
                Err(ArtifactError::Fenced)
            }
            Err(error) => Err(ArtifactError::LeaseUnknown(error.to_string())),
        }
    }
}

impl FencedArtifacts {
    /// For a run's last hand-over of its unsaved recordings: only a known loss of the lease
    /// refuses it. A session store out of reach (the outage that may well be why the saves
    /// failed) must not cost the recordings their later save.
    async fn check_at_end(&self) -> Result<(), ArtifactError> {
        match self.check().await {
            Err(ArtifactError::LeaseUnknown(_)) => Ok(()),
            other => other,
        }
    }
}

#[async_trait]
impl ArtifactService for FencedArtifacts {
    async fn save(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        artifact: Artifact,
    ) -> Result<u64, ArtifactError> {
        self.check().await?;
        self.inner.save(scope, filename, artifact).await
    }

    async fn load(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        version: Option<u64>,
    ) -> Result<Option<Artifact>, ArtifactError> {
        self.inner.load(scope, filename, version).await
    }

    async fn list_names(&self, scope: ArtifactScope<'_>) -> Result<Vec<String>, ArtifactError> {
        self.inner.list_names(scope).await
    }

    async fn list_versions(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
    ) -> Result<Vec<u64>, ArtifactError> {
        self.inner.list_versions(scope, filename).await
    }

    async fn describe(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
    ) -> Result<Option<ArtifactInfo>, ArtifactError> {
        self.inner.describe(scope, filename).await
    }

    async fn check_writable(&self) -> Result<(), ArtifactError> {
        self.inner.check_writable().await
    }

    async fn delete(&self, scope: ArtifactScope<'_>, filename: &str) -> Result<(), ArtifactError> {
        self.check().await?;
        self.inner.delete(scope, filename).await
    }

    fn spool_dir(&self) -> Option<&SpoolDir> {
        self.inner.spool_dir()
    }

    async fn save_spooled(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        mime_type: String,
        spool: SpoolFile,
    ) -> Result<u64, (ArtifactError, SpoolFile)> {
        if let Err(error) = self.check().await {
            return Err((error, spool));
        }
        self.inner
            .save_spooled(scope, filename, mime_type, spool)
            .await
    }

    async fn save_later(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        mime_type: String,
        spool: SpoolFile,
    ) -> Result<(), (ArtifactError, SpoolFile)> {
        if let Err(error) = self.check_at_end().await {
            return Err((error, spool));
        }
        self.inner
            .save_later(scope, filename, mime_type, spool)
            .await
    }

    async fn save_later_in_memory(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        mime_type: String,
        data: Bytes,
    ) -> Result<(), ArtifactError> {
        self.check_at_end().await?;
        self.inner
            .save_later_in_memory(scope, filename, mime_type, data)
            .await
    }
}
