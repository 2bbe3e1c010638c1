//! Artifacts (binary files with versions): the `ArtifactService` contract and its backends.
//!
//! A filename starting `user:` is scoped to the user; any other name is scoped to a session.
//! Versions start at 0 and each save adds one.

mod error;
mod filesystem;
mod folder_sync;
mod later;
mod memory;
mod object;
mod spool;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

pub use error::ArtifactError;
pub use filesystem::FileArtifactService;
pub use memory::InMemoryArtifactService;
pub use object::{ObjectArtifactService, DEFAULT_SAVE_TIMEOUT, PART_BYTES};
pub use spool::{SpoolDir, SpoolFile};

/// A stored artifact version: its bytes and mime type.
#[derive(Debug, Clone, PartialEq)]
pub struct Artifact {
    /// The bytes.
    pub data: Bytes,
    /// Mime type, with parameters (e.g. `audio/pcm;rate=16000`).
    pub mime_type: String,
}

/// What a listing shows of an artifact: its versions and its latest version's type and size,
/// read from metadata, never from the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactInfo {
    /// Versions, ascending.
    pub versions: Vec<u64>,
    /// The latest version's mime type.
    pub mime_type: String,
    /// The latest version's size in bytes.
    pub size: u64,
}

/// Where an artifact lives: app, user and session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArtifactScope<'a> {
    /// Application name.
    pub app_name: &'a str,
    /// Owner.
    pub user_id: &'a str,
    /// Session (ignored for `user:` names).
    pub session_id: &'a str,
}

/// Stores versioned artifacts.
#[async_trait]
pub trait ArtifactService: Send + Sync + std::fmt::Debug {
    /// Saves a new version and returns its number (0 for the first).
    async fn save(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        artifact: Artifact,
    ) -> Result<u64, ArtifactError>;

    /// Loads a version (the latest when `version` is `None`); `None` if missing.
    async fn load(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        version: Option<u64>,
    ) -> Result<Option<Artifact>, ArtifactError>;

    /// Lists artifact names visible in a session (session-scoped and `user:` ones), sorted.
    async fn list_names(&self, scope: ArtifactScope<'_>) -> Result<Vec<String>, ArtifactError>;

    /// Lists the versions of an artifact, ascending.
    async fn list_versions(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
    ) -> Result<Vec<u64>, ArtifactError>;

    /// An artifact's versions and its latest version's type and size; `None` if it has none.
    /// The stores here read metadata only; this default, for a store without one, loads the
    /// latest version.
    async fn describe(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
    ) -> Result<Option<ArtifactInfo>, ArtifactError> {
        let versions = self.list_versions(scope, filename).await?;
        let Some(&latest) = versions.last() else {
            return Ok(None);
        };
        Ok(self
            .load(scope, filename, Some(latest))
            .await?
            .map(|artifact| ArtifactInfo {
                versions,
                mime_type: artifact.mime_type,
                size: artifact.data.len() as u64,
            }))
    }

    /// Checks the store can write (for `/readyz`): a tiny write that leaves nothing behind.
    async fn check_writable(&self) -> Result<(), ArtifactError> {
        Ok(())
    }

    /// Deletes every version of an artifact.
    async fn delete(&self, scope: ArtifactScope<'_>, filename: &str) -> Result<(), ArtifactError>;

    /// Folder where a caller may gather bytes in a [`SpoolFile`] for `save_spooled`; `None` for
    /// stores that keep no files (callers then hold the bytes in memory).
    fn spool_dir(&self) -> Option<&SpoolDir> {
        None
    }

    /// Saves a spool file's bytes as a new version and returns its number; the file is moved
    /// into place where the store allows. On error the spool comes back, intact.
    async fn save_spooled(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        mime_type: String,
        spool: SpoolFile,
    ) -> Result<u64, (ArtifactError, SpoolFile)> {
        let data = match spool.read().await {
            Ok(data) => Bytes::from(data),
            Err(e) => return Err((e.into(), spool)),
        };
        match self
            .save(scope, filename, Artifact { data, mime_type })
            .await
        {
            Ok(version) => Ok(version),
            Err(e) => Err((e, spool)),
        }
    }

    /// Takes over a recording whose save failed and whose owner is going away (its run ended):
    /// a store that can, keeps the spool's file on local disk and saves it as the next version
    /// in the background. The default cannot: the spool comes back and its owner drops it.
    async fn save_later(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        mime_type: String,
        spool: SpoolFile,
    ) -> Result<(), (ArtifactError, SpoolFile)> {
        let _ = (scope, filename, mime_type);
        Err((
            ArtifactError::InvalidArgument("this store saves nothing later".into()),
            spool,
        ))
    }

    /// Takes over, as [`save_later`](Self::save_later) does, a recording whose bytes are in
    /// memory only: its spool file could not be written (a full disk). The default cannot.
    async fn save_later_in_memory(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        mime_type: String,
        data: Bytes,
    ) -> Result<(), ArtifactError> {
        let _ = (scope, filename, mime_type, data);
        Err(ArtifactError::InvalidArgument(
            "this store saves nothing later".into(),
        ))
    }
}

/// Checks an artifact filename: 1–255 characters, no path separators, no `..`, no control chars.
pub fn validate_filename(filename: &str) -> Result<(), ArtifactError> {
    let name = filename.strip_prefix(USER_PREFIX).unwrap_or(filename);
    let ok = !name.is_empty()
        && filename.len() <= 255
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && !name.chars().any(char::is_control);
    if ok {
        Ok(())
    } else {
        Err(ArtifactError::InvalidName(filename.to_owned()))
    }
}

/// Checks an app name, user id or session id: 1–128 characters of `A-Za-z0-9._:@-`, not `.`/`..`.
pub fn validate_scope_id(kind: &str, value: &str) -> Result<(), ArtifactError> {
    // The ids become path components in the filesystem store, so this is what stops traversal.
    let ok_char = |c: char| c.is_ascii_alphanumeric() || "._:@-".contains(c);
    let ok = !value.is_empty()
        && value.len() <= 128
        && value != "."
        && value != ".."
        && value.chars().all(ok_char);
    if ok {
        Ok(())
    } else {
        Err(ArtifactError::InvalidArgument(format!(
            "invalid {kind} {value:?}"
        )))
    }
}

impl ArtifactScope<'_> {
    /// Checks the ids a filename's scope uses: app and user always, the session unless `user:`.
    pub fn validate_for(&self, filename: &str) -> Result<(), ArtifactError> {
        validate_filename(filename)?;
        validate_scope_id("app name", self.app_name)?;
        validate_scope_id("user id", self.user_id)?;
        if !is_user_scoped(filename) {
            validate_scope_id("session id", self.session_id)?;
        }
        Ok(())
    }
}

/// True for `user:` names, which are shared by all of a user's sessions.
pub fn is_user_scoped(filename: &str) -> bool {
    filename.starts_with(USER_PREFIX)
}

/// The prefix that makes an artifact user-scoped.
pub const USER_PREFIX: &str = "user:";

/// Opens the artifact store a URL names: `memory:`, `file://PATH`, or a bucket
/// (`s3://BUCKET/PREFIX`, `gs://BUCKET/PREFIX`, `az://CONTAINER/PREFIX`), whose spool files go
/// to the system's temp folder.
///
/// `memory:` and `file://` keep their own stores rather than `object_store`'s: theirs write a
/// recording by moving its spool file into place, with no copy.
pub async fn open_artifact_service(
    url: &str,
) -> Result<std::sync::Arc<dyn ArtifactService>, ArtifactError> {
    open_artifact_service_in(url, None, Some(DEFAULT_SAVE_TIMEOUT)).await
}

/// [`open_artifact_service`], with a bucket's spool files (recordings on their way to it) in a
/// folder of their own inside `spool_root` (a disk the operator chose, where a temp folder may
/// be memory), and its saves bounded by `save_timeout` (`None`: only by its requests' own).
pub async fn open_artifact_service_in(
    url: &str,
    spool_root: Option<&Path>,
    save_timeout: Option<Duration>,
) -> Result<std::sync::Arc<dyn ArtifactService>, ArtifactError> {
    if url == "memory:" || url == "memory://" {
        return Ok(std::sync::Arc::new(InMemoryArtifactService::default()));
    }
    if let Some(path) = url.strip_prefix("file://") {
        return Ok(std::sync::Arc::new(FileArtifactService::open(path).await?));
    }
    if ["s3://", "gs://", "az://"]
        .iter()
        .any(|s| url.starts_with(s))
    {
        let store = ObjectArtifactService::open(url)?.with_save_timeout(save_timeout);
        return Ok(std::sync::Arc::new(match spool_root {
            Some(root) => store.with_spool_root(root),
            None => store,
        }));
    }
    Err(ArtifactError::InvalidArgument(format!(
        "unsupported artifact store {url:?} (expected memory:, file://PATH, s3://, gs:// or az://)"
    )))
}
