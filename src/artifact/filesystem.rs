//! Filesystem artifact store (the default): `{root}/{app}/{user}/{session}/{filename}/{version}`,
//! user-scoped names under `{root}/{app}/{user}/_user/`. Each version is the raw bytes plus a
//! `{version}.mime` sidecar; writes go through a temp file and a rename, so a crash never leaves a
//! half-written version.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::fs;

use super::{validate_filename, Artifact, ArtifactError, ArtifactScope, ArtifactService};

/// Artifacts as files under a root folder.
#[derive(Debug, Clone)]
pub struct FileArtifactService {
    root: PathBuf,
}

const USER_DIR: &str = "_user";

/// Checks an app, user or session id used as a path component.
fn check_component(kind: &str, value: &str) -> Result<(), ArtifactError> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || "._:@-".contains(c);
    if value.is_empty()
        || value.len() > 128
        || value == "."
        || value == ".."
        || !value.chars().all(ok_char)
    {
        return Err(ArtifactError::InvalidArgument(format!(
            "invalid {kind} {value:?}"
        )));
    }
    Ok(())
}

impl FileArtifactService {
    /// Opens (creating) the root folder.
    pub async fn open(root: impl AsRef<Path>) -> Result<Self, ArtifactError> {
        let root = root.as_ref().to_path_buf();
        fs::create_dir_all(&root).await?;
        Ok(FileArtifactService { root })
    }

    fn user_dir(&self, scope: ArtifactScope<'_>) -> Result<PathBuf, ArtifactError> {
        check_component("app name", scope.app_name)?;
        check_component("user id", scope.user_id)?;
        Ok(self.root.join(scope.app_name).join(scope.user_id))
    }

    fn session_dir(&self, scope: ArtifactScope<'_>) -> Result<PathBuf, ArtifactError> {
        check_component("session id", scope.session_id)?;
        if scope.session_id == USER_DIR {
            return Err(ArtifactError::InvalidArgument(format!(
                "invalid session id {USER_DIR:?}"
            )));
        }
        Ok(self.user_dir(scope)?.join(scope.session_id))
    }

    fn artifact_dir(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
    ) -> Result<PathBuf, ArtifactError> {
        validate_filename(filename)?;
        Ok(match filename.strip_prefix("user:") {
            Some(name) => self.user_dir(scope)?.join(USER_DIR).join(name),
            None => self.session_dir(scope)?.join(filename),
        })
    }

    async fn versions_in(dir: &Path) -> Result<Vec<u64>, ArtifactError> {
        let mut versions = Vec::new();
        let mut entries = match fs::read_dir(dir).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(versions),
            Err(e) => return Err(e.into()),
        };
        while let Some(entry) = entries.next_entry().await? {
            if let Some(v) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u64>().ok())
            {
                versions.push(v);
            }
        }
        versions.sort_unstable();
        Ok(versions)
    }

    async fn names_in(
        dir: &Path,
        prefix: &str,
        names: &mut Vec<String>,
    ) -> Result<(), ArtifactError> {
        let mut entries = match fs::read_dir(dir).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        while let Some(entry) = entries.next_entry().await? {
            if entry.file_type().await?.is_dir() {
                if let Some(name) = entry.file_name().to_str() {
                    names.push(format!("{prefix}{name}"));
                }
            }
        }
        Ok(())
    }
}

async fn write_atomically(path: &Path, data: &[u8]) -> Result<(), ArtifactError> {
    let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4()));
    fs::write(&tmp, data).await?;
    fs::rename(&tmp, path).await?;
    Ok(())
}

#[async_trait]
impl ArtifactService for FileArtifactService {
    async fn save(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        artifact: Artifact,
    ) -> Result<u64, ArtifactError> {
        let dir = self.artifact_dir(scope, filename)?;
        fs::create_dir_all(&dir).await?;
        // Create the version's file exclusively so two concurrent saves never share a number.
        let mut version = Self::versions_in(&dir).await?.last().map_or(0, |v| v + 1);
        loop {
            let path = dir.join(version.to_string());
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .await
            {
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => version += 1,
                Err(e) => return Err(e.into()),
            }
        }
        write_atomically(
            &dir.join(format!("{version}.mime")),
            artifact.mime_type.as_bytes(),
        )
        .await?;
        write_atomically(&dir.join(version.to_string()), &artifact.data).await?;
        Ok(version)
    }

    async fn load(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        version: Option<u64>,
    ) -> Result<Option<Artifact>, ArtifactError> {
        let dir = self.artifact_dir(scope, filename)?;
        let version = match version {
            Some(v) => v,
            None => match Self::versions_in(&dir).await?.last() {
                Some(v) => *v,
                None => return Ok(None),
            },
        };
        let data = match fs::read(dir.join(version.to_string())).await {
            Ok(data) => data,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mime_type = fs::read_to_string(dir.join(format!("{version}.mime")))
            .await
            .unwrap_or_else(|_| "application/octet-stream".into());
        Ok(Some(Artifact {
            data: Bytes::from(data),
            mime_type,
        }))
    }

    async fn list_names(&self, scope: ArtifactScope<'_>) -> Result<Vec<String>, ArtifactError> {
        let mut names = Vec::new();
        Self::names_in(&self.session_dir(scope)?, "", &mut names).await?;
        Self::names_in(&self.user_dir(scope)?.join(USER_DIR), "user:", &mut names).await?;
        names.sort();
        names.dedup();
        Ok(names)
    }

    async fn list_versions(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
    ) -> Result<Vec<u64>, ArtifactError> {
        Self::versions_in(&self.artifact_dir(scope, filename)?).await
    }

    async fn delete(&self, scope: ArtifactScope<'_>, filename: &str) -> Result<(), ArtifactError> {
        match fs::remove_dir_all(self.artifact_dir(scope, filename)?).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}
