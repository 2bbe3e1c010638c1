//! Filesystem artifact store (the default).
//!
//! Layout: `{root}/{app}/{user}/{session}/{filename}/{version}` for session-scoped names and
//! `{root}/{app}/{user}/_user/{name without "user:"}/{version}` for `user:` names. Each version is
//! a file of raw bytes with a `{version}.meta.json` sidecar (`{"mimeType": …}`).
//!
//! A save first claims its number by creating the sidecar exclusively (so concurrent saves never
//! share a version), then writes the bytes to a temp file, syncs it and renames it into place. A
//! version exists only once its bytes file does, so a crash at any point leaves either a whole
//! version or none (at worst an orphan sidecar, which only makes the next save skip a number).
//!
//! Recordings whose run ends while the disk is full are kept by the process and saved once it
//! has room (see [`super::later`]).

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::fs;

use super::folder_sync::FolderSyncs;
use super::later::Later;
use super::spool::{own_spool_folder, sync_and_uncache, SPOOL_DIR};
use super::{
    validate_filename, validate_scope_id, Artifact, ArtifactError, ArtifactInfo, ArtifactScope,
    ArtifactService, SpoolDir, SpoolFile, USER_PREFIX,
};

/// Artifacts as files under a root folder.
#[derive(Debug, Clone)]
pub struct FileArtifactService {
    root: PathBuf,
    /// `{root}/#spool/{uuid}`: spool files, on the same filesystem so a save is a rename; a
    /// folder of this store's own, since several processes may share the root.
    spool: SpoolDir,
    /// Holds the spool folder's lock (see `own_spool_folder`).
    _spool_lock: std::sync::Arc<std::fs::File>,
    /// Recordings whose run ended before they could be saved (a full disk).
    later: std::sync::Arc<Later>,
    /// The folder syncs that end saves, shared by saves that need the same folder at once.
    syncs: std::sync::Arc<FolderSyncs>,
    /// Stops the task saving them once the last of the store's handles goes: every handle holds
    /// the guard but the task's own.
    stop: tokio_util::sync::CancellationToken,
    _stop: Option<std::sync::Arc<tokio_util::sync::DropGuard>>,
}

/// The folder (inside the user's) holding `user:` artifacts; refused as a session id.
const USER_DIR: &str = "_user";
const META_SUFFIX: &str = ".meta.json";
const TMP_PREFIX: &str = ".tmp-";
const FALLBACK_MIME: &str = "application/octet-stream";

/// A version's sidecar.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    mime_type: String,
}

/// What a scan of an artifact's folder found.
#[derive(Debug, Default)]
struct Scan {
    /// Versions whose bytes are in place, ascending.
    versions: Vec<u64>,
    /// The lowest number no save has claimed yet.
    next: u64,
}

fn meta_path(dir: &Path, version: u64) -> PathBuf {
    dir.join(format!("{version}{META_SUFFIX}"))
}

/// `Ok(None)` for a missing file or folder, the error otherwise.
fn missing_ok<T>(result: std::io::Result<T>) -> Result<Option<T>, ArtifactError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

impl FileArtifactService {
    /// Opens (creating) the root folder.
    pub async fn open(root: impl AsRef<Path>) -> Result<Self, ArtifactError> {
        let root = root.as_ref().to_path_buf();
        if root.as_os_str().is_empty() {
            return Err(ArtifactError::InvalidArgument(
                "empty artifact root path".into(),
            ));
        }
        fs::create_dir_all(&root).await?;
        let spool_root = root.join(SPOOL_DIR);
        let (spool, lock) = tokio::task::spawn_blocking(move || own_spool_folder(&spool_root))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)))?;
        let stop = tokio_util::sync::CancellationToken::new();
        Ok(FileArtifactService {
            root,
            spool: SpoolDir::new(spool),
            _spool_lock: std::sync::Arc::new(lock),
            later: std::sync::Arc::default(),
            syncs: std::sync::Arc::default(),
            _stop: Some(std::sync::Arc::new(stop.clone().drop_guard())),
            stop,
        })
    }

    /// Starts saving the recordings kept for later, unless that runs already.
    fn save_kept(&self) {
        // The task's handle holds no stop guard: the store's last handle going stops it.
        let store = FileArtifactService {
            _stop: None,
            ..self.clone()
        };
        self.later.run(store, self.stop.clone());
    }

    fn user_dir(&self, scope: ArtifactScope<'_>) -> Result<PathBuf, ArtifactError> {
        validate_scope_id("app name", scope.app_name)?;
        validate_scope_id("user id", scope.user_id)?;
        Ok(self.root.join(scope.app_name).join(scope.user_id))
    }

    fn session_dir(&self, scope: ArtifactScope<'_>) -> Result<PathBuf, ArtifactError> {
        validate_scope_id("session id", scope.session_id)?;
        if scope.session_id == USER_DIR {
            // It would alias the folder of the user's `user:` artifacts.
            return Err(ArtifactError::InvalidArgument(format!(
                "invalid session id {USER_DIR:?} (reserved)"
            )));
        }
        Ok(self.user_dir(scope)?.join(scope.session_id))
    }

    /// The folder holding an artifact's versions (validates the name and the ids it uses).
    fn artifact_dir(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
    ) -> Result<PathBuf, ArtifactError> {
        validate_filename(filename)?;
        Ok(match filename.strip_prefix(USER_PREFIX) {
            Some(name) => self.user_dir(scope)?.join(USER_DIR).join(name),
            None => self.session_dir(scope)?.join(filename),
        })
    }

    /// What is in an artifact's folder (nothing if it does not exist).
    fn scan(dir: &Path) -> Result<Scan, ArtifactError> {
        let mut scan = Scan::default();
        let Some(entries) = missing_ok(std::fs::read_dir(dir))? else {
            return Ok(scan);
        };
        for entry in entries {
            let name = entry?.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Ok(v) = name.parse::<u64>() {
                scan.versions.push(v);
                scan.next = scan.next.max(v.saturating_add(1));
            } else if let Some(Ok(v)) = name.strip_suffix(META_SUFFIX).map(str::parse::<u64>) {
                scan.next = scan.next.max(v.saturating_add(1));
            }
        }
        scan.versions.sort_unstable();
        Ok(scan)
    }

    /// Claims the next free version number by creating its sidecar exclusively; a folder this
    /// save just created starts at 0 without being read.
    // The sidecar is not synced: a crash can lose it, and a version without one reads back with
    // the fallback mime type; the bytes themselves are synced before they become visible.
    fn claim_version(dir: &Path, meta: &[u8], created: bool) -> Result<u64, ArtifactError> {
        let mut version = if created { 0 } else { Self::scan(dir)?.next };
        loop {
            let opened = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(meta_path(dir, version));
            match opened {
                Ok(mut file) => {
                    file.write_all(meta)?;
                    return Ok(version);
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                    version = version.checked_add(1).ok_or_else(|| {
                        ArtifactError::InvalidArgument("artifact version overflow".into())
                    })?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Writes the bytes of a claimed version to `to`: temp file beside it, sync, rename.
    fn write_version(to: &Path, data: &[u8]) -> Result<(), ArtifactError> {
        let dir = to.parent().unwrap_or(Path::new("."));
        let tmp = dir.join(format!("{TMP_PREFIX}{}", uuid::Uuid::new_v4()));
        let written = (|| {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(data)?;
            sync_and_uncache(&file)?;
            drop(file);
            std::fs::rename(&tmp, to)
        })();
        if let Err(e) = written {
            // Best effort: the error that matters is the write's, not the cleanup's.
            let _ = std::fs::remove_file(&tmp);
            return Err(e.into());
        }
        Ok(())
    }

    /// Saves a new version in `dir`: claim a number, then put its bytes in place with `write`.
    ///
    /// The version is reported saved only once its name is on the disk: the file's bytes are
    /// synced before the rename, and the folder (with any folder made for it, up to `root`) after
    /// — by a sync of each that started after the change, which a concurrent save of the same
    /// folder may have run (the two recordings of a turn share their session's folder).
    fn save_in(
        root: &Path,
        syncs: &FolderSyncs,
        dir: &Path,
        meta: &[u8],
        write: impl FnOnce(&Path) -> Result<(), ArtifactError>,
    ) -> Result<u64, ArtifactError> {
        let made = ensure_dir(dir)?;
        let made_ticket = syncs.ticket();
        let version = Self::claim_version(dir, meta, made == Made::Folder)?;
        if let Err(e) = write(&dir.join(version.to_string())) {
            // Release the claim so the number is reused rather than left as a gap.
            let _ = std::fs::remove_file(meta_path(dir, version));
            return Err(e);
        }
        syncs.sync(dir, syncs.ticket(), sync_dir)?;
        let made_above = match made {
            Made::Nothing => 0,
            Made::Folder => 1,
            Made::Path => usize::MAX,
        };
        for folder in dir
            .ancestors()
            .skip(1)
            .take(made_above)
            .take_while(|folder| folder.starts_with(root))
        {
            syncs.sync(folder, made_ticket, sync_dir)?;
        }
        Ok(version)
    }

    /// A version's sidecar for this mime type.
    fn meta(mime_type: String) -> Result<Vec<u8>, ArtifactError> {
        serde_json::to_vec(&Meta { mime_type })
            .map_err(|e| ArtifactError::InvalidArgument(format!("artifact metadata: {e}")))
    }

    /// Reads a version (the latest if `None`) from `dir`.
    fn load_from(dir: &Path, version: Option<u64>) -> Result<Option<Artifact>, ArtifactError> {
        let version = match version {
            Some(v) => v,
            None => match Self::scan(dir)?.versions.last() {
                Some(v) => *v,
                None => return Ok(None),
            },
        };
        let Some(data) = missing_ok(std::fs::read(dir.join(version.to_string())))? else {
            return Ok(None);
        };
        Ok(Some(Artifact {
            data: Bytes::from(data),
            mime_type: Self::mime_type(dir, version)?,
        }))
    }

    /// A version's mime type from its metadata file.
    fn mime_type(dir: &Path, version: u64) -> Result<String, ArtifactError> {
        let meta = missing_ok(std::fs::read(meta_path(dir, version)))?;
        Ok(match meta.map(|m| serde_json::from_slice::<Meta>(&m)) {
            Some(Ok(meta)) => meta.mime_type,
            Some(Err(error)) => {
                tracing::warn!(%error, dir = %dir.display(), version, "unreadable artifact metadata");
                FALLBACK_MIME.to_owned()
            }
            None => FALLBACK_MIME.to_owned(),
        })
    }

    /// Versions, and the latest one's type and size, from the folder listing and the metadata.
    fn describe_in(dir: &Path) -> Result<Option<ArtifactInfo>, ArtifactError> {
        let versions = Self::scan(dir)?.versions;
        let Some(&latest) = versions.last() else {
            return Ok(None);
        };
        let Some(file) = missing_ok(std::fs::metadata(dir.join(latest.to_string())))? else {
            return Ok(None);
        };
        Ok(Some(ArtifactInfo {
            versions,
            mime_type: Self::mime_type(dir, latest)?,
            size: file.len(),
        }))
    }

    /// Names of the artifact folders in `dir` that hold at least one version.
    fn names_in(dir: &Path, prefix: &str, names: &mut Vec<String>) -> Result<(), ArtifactError> {
        let Some(entries) = missing_ok(std::fs::read_dir(dir))? else {
            return Ok(());
        };
        for entry in entries {
            let entry = entry?;
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if !Self::scan(&entry.path())?.versions.is_empty() {
                names.push(format!("{prefix}{name}"));
            }
        }
        Ok(())
    }
}

/// Creates `dir` and any missing parents (blocking); true when this call created `dir` itself.
///
/// Every recording is an artifact of its own, so most saves make a new folder, and a new folder
/// needs no listing to find its first free version.
fn ensure_dir(dir: &Path) -> std::io::Result<Made> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(Made::Folder),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(Made::Nothing),
        // A missing parent: another save may create `dir` at the same moment, so it counts as
        // not ours and its versions are read.
        Err(e) if e.kind() == ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map(|()| Made::Path)
        }
        Err(e) => Err(e),
    }
}

/// What `ensure_dir` created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Made {
    /// The folder was there.
    Nothing,
    /// The folder, in a parent that was there: it is ours alone, with no versions yet.
    Folder,
    /// The folder and perhaps some of its ancestors (or another save made them at once).
    Path,
}

/// Syncs a folder, so that the names created or renamed in it survive a crash (blocking).
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Runs blocking file work on tokio's blocking pool: one trip per operation, not one per syscall.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ArtifactError> + Send + 'static,
) -> Result<T, ArtifactError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ArtifactError::Io(std::io::Error::other(e)))?
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
        let meta = Self::meta(artifact.mime_type)?;
        let (root, syncs) = (self.root.clone(), self.syncs.clone());
        blocking(move || {
            Self::save_in(&root, &syncs, &dir, &meta, |to| {
                Self::write_version(to, &artifact.data)
            })
        })
        .await
    }

    async fn load(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        version: Option<u64>,
    ) -> Result<Option<Artifact>, ArtifactError> {
        let dir = self.artifact_dir(scope, filename)?;
        blocking(move || Self::load_from(&dir, version)).await
    }

    async fn list_names(&self, scope: ArtifactScope<'_>) -> Result<Vec<String>, ArtifactError> {
        let session_dir = self.session_dir(scope)?;
        let user_dir = self.user_dir(scope)?.join(USER_DIR);
        blocking(move || {
            let mut names = Vec::new();
            Self::names_in(&session_dir, "", &mut names)?;
            Self::names_in(&user_dir, USER_PREFIX, &mut names)?;
            names.sort();
            names.dedup();
            Ok(names)
        })
        .await
    }

    async fn list_versions(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
    ) -> Result<Vec<u64>, ArtifactError> {
        let dir = self.artifact_dir(scope, filename)?;
        blocking(move || Ok(Self::scan(&dir)?.versions)).await
    }

    async fn describe(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
    ) -> Result<Option<ArtifactInfo>, ArtifactError> {
        let dir = self.artifact_dir(scope, filename)?;
        blocking(move || Self::describe_in(&dir)).await
    }

    async fn check_writable(&self) -> Result<(), ArtifactError> {
        // One byte written and synced in the spool folder (on the artifacts' file system), then
        // removed: a full disk or a read-only mount fails it.
        let probe = self
            .spool
            .join(format!("{TMP_PREFIX}ready-{}", uuid::Uuid::new_v4()));
        blocking(move || {
            let written = (|| {
                let mut file = std::fs::File::create(&probe)?;
                file.write_all(b"0")?;
                file.sync_data()
            })();
            let _ = std::fs::remove_file(&probe);
            Ok(written?)
        })
        .await
    }

    async fn delete(&self, scope: ArtifactScope<'_>, filename: &str) -> Result<(), ArtifactError> {
        let dir = self.artifact_dir(scope, filename)?;
        missing_ok(fs::remove_dir_all(dir).await)?;
        Ok(())
    }

    fn spool_dir(&self) -> Option<&SpoolDir> {
        Some(&self.spool)
    }

    async fn save_later(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        mime_type: String,
        spool: SpoolFile,
    ) -> Result<(), (ArtifactError, SpoolFile)> {
        if let Err(error) = self.artifact_dir(scope, filename) {
            return Err((error, spool));
        }
        self.later.hold_file(scope, filename, mime_type, spool);
        tracing::warn!(
            filename,
            "a recording waits on its spool file for room on the artifact disk"
        );
        self.save_kept();
        Ok(())
    }

    async fn save_later_in_memory(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        mime_type: String,
        data: Bytes,
    ) -> Result<(), ArtifactError> {
        self.artifact_dir(scope, filename)?;
        self.later.hold_bytes(scope, filename, mime_type, data)?;
        tracing::warn!(
            filename,
            "a recording waits in memory for room on the artifact disk"
        );
        self.save_kept();
        Ok(())
    }

    async fn save_spooled(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        mime_type: String,
        spool: SpoolFile,
    ) -> Result<u64, (ArtifactError, SpoolFile)> {
        let prepared = self.artifact_dir(scope, filename).and_then(|dir| {
            let meta = Self::meta(mime_type)?;
            Ok::<_, ArtifactError>((dir, meta, spool.handle()?))
        });
        let (dir, meta, handle) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => return Err((e, spool)),
        };
        let (root, syncs) = (self.root.clone(), self.syncs.clone());
        let saved = blocking(move || {
            Self::save_in(&root, &syncs, &dir, &meta, |to| {
                handle.persist(to).map_err(Into::into)
            })
        })
        .await;
        match saved {
            Ok(version) => {
                spool.moved();
                Ok(version)
            }
            Err(e) => Err((e, spool)),
        }
    }
}
