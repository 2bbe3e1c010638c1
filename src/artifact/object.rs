//! Object-store artifacts: S3 (and S3-compatible servers), Google Cloud Storage and Azure Blob
//! Storage through the `object_store` crate, so that every gateway node sees every recording.
//!
//! Layout under the URL's prefix, as in the file store: `{app}/{user}/{session}/{filename}/{version}`
//! for session-scoped names and `{app}/{user}/_user/{name without "user:"}/{version}` for `user:`
//! names, each version's bytes beside a `{version}.meta.json` object (`{"mimeType": …}`). Names are
//! percent-encoded into one key segment (`%` included), so any valid name maps to one key and back.
//!
//! A save first claims its number by creating the sidecar with a conditional put (`If-None-Match:
//! *` on S3 and Azure, generation 0 on GCS), so saves from any number of nodes never share a
//! version; then it puts the bytes. A version exists only once its bytes object does, so a failed
//! save leaves no version (its claim is released, or at worst left as an orphan sidecar, which only
//! makes the next save skip a number). Listing reads the bucket's listing (keys and sizes), never an
//! object's bytes.
//!
//! Recordings gather in spool files on local disk while their turn runs (the live flow's spill
//! thread writes them, exactly as for the file store); the save then streams the file to the bucket
//! in parts of [`PART_BYTES`], so no recording is ever held whole in memory. A failed upload hands
//! the spool back, still on disk, and the live flow retries it at its next flush; recordings still
//! unsaved when their run ends move to an outbox folder beside the spools, which a background task
//! uploads once the bucket answers again (see [`ArtifactService::save_later`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::{Path as Key, PathPart};
use object_store::{
    Attribute, Attributes, ObjectStore, PutMode, PutMultipartOptions, PutOptions, PutPayload,
    RetryConfig, WriteMultipart,
};
use serde::{Deserialize, Serialize};

use super::spool::SpoolHandle;
use super::{
    validate_filename, validate_scope_id, Artifact, ArtifactError, ArtifactScope, ArtifactService,
    SpoolFile, USER_PREFIX,
};

/// Bytes per uploaded part of a spooled recording, and the most a save reads into memory at once.
/// S3 wants parts of at least 5 MiB (all but the last) and at most 10,000 of them.
pub const PART_BYTES: usize = 8 * 1024 * 1024;
/// Parts of one recording in flight at once: memory per upload stays within a few parts.
const PARTS_IN_FLIGHT: usize = 2;
/// The key segment holding `user:` artifacts; refused as a session id.
const USER_DIR: &str = "_user";
const META_SUFFIX: &str = ".meta.json";
const FALLBACK_MIME: &str = "application/octet-stream";
/// Most version numbers one save tries before it gives up (each try lost a race to another save).
const CLAIM_TRIES: u32 = 1_000;

/// A version's sidecar.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    mime_type: String,
}

/// Artifacts in a bucket (S3, GCS, Azure) under a key prefix.
pub struct ObjectArtifactService {
    bucket: Bucket,
    /// Local folder for spool files (recordings being gathered before their upload).
    spool: PathBuf,
    /// The store's URL, for logs: bucket and prefix, never credentials.
    url: String,
    /// Recordings saved later, in the background (see [`ArtifactService::save_later`]).
    outbox: Arc<Mutex<Outbox>>,
}

/// The bucket and the key prefix every artifact lives under (may be empty): what a save needs,
/// shared with the outbox's task.
#[derive(Clone)]
struct Bucket {
    store: Arc<dyn ObjectStore>,
    prefix: Key,
}

/// Recordings whose run ended before their upload succeeded, waiting in files on local disk.
#[derive(Debug, Default)]
struct Outbox {
    pending: Vec<Pending>,
    /// A task is uploading them.
    running: bool,
}

/// One recording in the outbox.
#[derive(Debug)]
struct Pending {
    app_name: String,
    user_id: String,
    session_id: String,
    filename: String,
    mime_type: String,
    path: PathBuf,
}

impl std::fmt::Debug for ObjectArtifactService {
    // By hand: the client's own Debug prints its configuration, credentials included.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectArtifactService")
            .field("url", &self.url)
            .field("spool", &self.spool)
            .finish_non_exhaustive()
    }
}

/// Requests to the bucket give up within this budget, so a turn waiting on a save is told of an
/// outage in seconds rather than after the client's default of minutes of retries.
fn retry() -> RetryConfig {
    RetryConfig {
        max_retries: 3,
        retry_timeout: Duration::from_secs(10),
        ..RetryConfig::default()
    }
}

/// Client settings applied over the environment's (as configuration keys: the builders'
/// `with_client_options` would replace the environment's, `AWS_ALLOW_HTTP` among them).
const CLIENT_DEFAULTS: [(&str, &str); 2] = [("connect_timeout", "5s"), ("timeout", "60s")];

fn store_error(error: object_store::Error) -> ArtifactError {
    ArtifactError::Store(Box::new(error))
}

impl ObjectArtifactService {
    /// Opens the bucket a URL names (`s3://bucket/prefix`, `gs://bucket/prefix`,
    /// `az://container/prefix`), with credentials and settings from the standard environment
    /// variables (`AWS_*`, `GOOGLE_*`, `AZURE_*`; `AWS_ENDPOINT_URL` and `AWS_ALLOW_HTTP` for an
    /// S3-compatible server). Spool files go to a fresh folder in the system's temp folder.
    pub fn open(url: &str) -> Result<Self, ArtifactError> {
        Self::open_with(url, std::iter::empty::<(&str, &str)>())
    }

    /// [`open`](Self::open), with `object_store` configuration keys (`aws_endpoint`,
    /// `google_service_account`, `azure_storage_account_name`, …) set over the environment's.
    pub fn open_with<K: AsRef<str>, V: Into<String>>(
        url: &str,
        options: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, ArtifactError> {
        let options: Vec<(String, String)> = options
            .into_iter()
            .map(|(k, v)| (k.as_ref().to_owned(), v.into()))
            .collect();
        let settings = || {
            let given = options.iter().map(|(k, v)| (k.as_str(), v.as_str()));
            CLIENT_DEFAULTS.into_iter().chain(given)
        };
        let parsed = reqwest::Url::parse(url)
            .map_err(|e| ArtifactError::InvalidArgument(format!("artifact store URL: {e}")))?;
        let bucket = parsed.host_str().unwrap_or_default();
        if bucket.is_empty() {
            return Err(ArtifactError::InvalidArgument(format!(
                "artifact store {url:?} names no bucket"
            )));
        }
        let root = format!("{}://{bucket}", parsed.scheme());
        let unknown = |key: &str| {
            ArtifactError::InvalidArgument(format!("unknown object store setting {key:?}"))
        };
        let store: Arc<dyn ObjectStore> = match parsed.scheme() {
            "s3" => {
                let mut builder = object_store::aws::AmazonS3Builder::from_env();
                for (key, value) in settings() {
                    builder = builder.with_config(key.parse().map_err(|_| unknown(key))?, value);
                }
                let built = builder.with_url(&root).with_retry(retry()).build();
                Arc::new(built.map_err(store_error)?)
            }
            "gs" => {
                let mut builder = object_store::gcp::GoogleCloudStorageBuilder::from_env();
                for (key, value) in settings() {
                    builder = builder.with_config(key.parse().map_err(|_| unknown(key))?, value);
                }
                let built = builder.with_url(&root).with_retry(retry()).build();
                Arc::new(built.map_err(store_error)?)
            }
            "az" => {
                let mut builder = object_store::azure::MicrosoftAzureBuilder::from_env();
                for (key, value) in settings() {
                    builder = builder.with_config(key.parse().map_err(|_| unknown(key))?, value);
                }
                let built = builder.with_url(&root).with_retry(retry()).build();
                Arc::new(built.map_err(store_error)?)
            }
            other => {
                return Err(ArtifactError::InvalidArgument(format!(
                    "unsupported object store scheme {other:?} (s3, gs or az)"
                )))
            }
        };
        let path = parsed.path().trim_matches('/');
        let prefix = Key::parse(path)
            .map_err(|e| ArtifactError::InvalidArgument(format!("artifact store prefix: {e}")))?;
        let spool = spool_folder(&std::env::temp_dir());
        Ok(Self::with_store(
            store,
            prefix,
            spool,
            format!("{root}/{path}"),
        ))
    }

    /// Keeps spool files in a folder of this store's own inside `root` (made on first use)
    /// rather than in the temp folder.
    pub fn with_spool_root(mut self, root: &Path) -> Self {
        self.spool = spool_folder(root);
        self
    }

    /// Artifacts in `store` under `prefix`, with spool files in `spool` (made on first use).
    pub fn with_store(
        store: Arc<dyn ObjectStore>,
        prefix: Key,
        spool: PathBuf,
        url: String,
    ) -> Self {
        ObjectArtifactService {
            bucket: Bucket { store, prefix },
            spool,
            url,
            outbox: Arc::default(),
        }
    }
}

impl Bucket {
    /// The key prefix of a user's artifacts (validates the ids).
    fn user_key(&self, scope: ArtifactScope<'_>) -> Result<Key, ArtifactError> {
        validate_scope_id("app name", scope.app_name)?;
        validate_scope_id("user id", scope.user_id)?;
        Ok(self.prefix.child(scope.app_name).child(scope.user_id))
    }

    /// The key prefix of a session's artifacts.
    fn session_key(&self, scope: ArtifactScope<'_>) -> Result<Key, ArtifactError> {
        validate_scope_id("session id", scope.session_id)?;
        if scope.session_id == USER_DIR {
            // It would alias the user's `user:` artifacts.
            return Err(ArtifactError::InvalidArgument(format!(
                "invalid session id {USER_DIR:?} (reserved)"
            )));
        }
        Ok(self.user_key(scope)?.child(scope.session_id))
    }

    /// The key prefix holding an artifact's versions (validates the name and the ids it uses).
    fn artifact_key(&self, scope: ArtifactScope<'_>, filename: &str) -> Result<Key, ArtifactError> {
        validate_filename(filename)?;
        Ok(match filename.strip_prefix(USER_PREFIX) {
            Some(name) => self.user_key(scope)?.child(USER_DIR).child(name),
            None => self.session_key(scope)?.child(filename),
        })
    }

    /// Every object under `dir`, as (name segment below `dir`, last segment).
    async fn keys_under(&self, dir: &Key) -> Result<Vec<(String, String)>, ArtifactError> {
        let depth = dir.parts().count();
        let metas: Vec<_> = self
            .store
            .list(Some(dir))
            .try_collect()
            .await
            .map_err(store_error)?;
        Ok(metas
            .into_iter()
            .filter_map(|meta| {
                let parts: Vec<PathPart<'_>> = meta.location.parts().skip(depth).collect();
                match parts.as_slice() {
                    [first, .., last] => Some((decode(first), decode(last))),
                    [only] => Some((String::new(), decode(only))),
                    [] => None,
                }
            })
            .collect())
    }

    /// The versions of the artifact at `dir` whose bytes are in place (ascending), and the lowest
    /// number no save has claimed yet.
    async fn scan(&self, dir: &Key) -> Result<(Vec<u64>, u64), ArtifactError> {
        let mut versions = Vec::new();
        let mut next = 0u64;
        for (_, name) in self.keys_under(dir).await? {
            if let Ok(v) = name.parse::<u64>() {
                versions.push(v);
                next = next.max(v.saturating_add(1));
            } else if let Some(Ok(v)) = name.strip_suffix(META_SUFFIX).map(str::parse::<u64>) {
                next = next.max(v.saturating_add(1));
            }
        }
        versions.sort_unstable();
        Ok((versions, next))
    }

    /// Claims the next free version of the artifact at `dir` by creating its sidecar only if no
    /// other save has: the one step where saves from several nodes meet.
    async fn claim(&self, dir: &Key, meta: &Bytes) -> Result<u64, ArtifactError> {
        let (_, mut version) = self.scan(dir).await?;
        for _ in 0..CLAIM_TRIES {
            let opts = PutOptions {
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            let payload = PutPayload::from_bytes(meta.clone());
            match self
                .store
                .put_opts(&meta_key(dir, version), payload, opts)
                .await
            {
                Ok(_) => return Ok(version),
                Err(object_store::Error::AlreadyExists { .. }) => {
                    version = version.checked_add(1).ok_or_else(|| {
                        ArtifactError::InvalidArgument("artifact version overflow".into())
                    })?;
                }
                Err(e) => return Err(store_error(e)),
            }
        }
        Err(ArtifactError::InvalidArgument(format!(
            "no free artifact version after {CLAIM_TRIES} tries"
        )))
    }

    /// Releases a claim whose bytes never arrived, so the number is reused rather than skipped.
    async fn release(&self, dir: &Key, version: u64) {
        if let Err(error) = self.store.delete(&meta_key(dir, version)).await {
            // Harmless: the next save skips the number.
            tracing::warn!(%error, version, "could not release an artifact version's claim");
        }
    }

    /// Puts a version's bytes, with its mime type as the object's content type for downloads
    /// straight from the bucket.
    async fn put_version(
        &self,
        key: &Key,
        mime_type: &str,
        data: Bytes,
    ) -> Result<(), ArtifactError> {
        let opts = PutOptions {
            attributes: content_type(mime_type),
            ..PutOptions::default()
        };
        self.store
            .put_opts(key, PutPayload::from_bytes(data), opts)
            .await
            .map_err(store_error)?;
        Ok(())
    }

    /// Uploads a spool file's bytes to `key`: one put when they fit in a part, else a multipart
    /// upload read from the file a part at a time (aborted on error).
    async fn upload_spool(
        &self,
        key: &Key,
        mime_type: &str,
        handle: SpoolHandle,
    ) -> Result<(), ArtifactError> {
        let len = handle.len();
        let handle = Arc::new(handle);
        let read = |offset: u64, len: usize| {
            let handle = Arc::clone(&handle);
            async move {
                tokio::task::spawn_blocking(move || handle.read_at(offset, len))
                    .await
                    .unwrap_or_else(|e| Err(std::io::Error::other(e)))
                    .map(Bytes::from)
            }
        };
        if len <= PART_BYTES as u64 {
            let data = read(0, len as usize).await?;
            return self.put_version(key, mime_type, data).await;
        }
        let opts = PutMultipartOptions {
            attributes: content_type(mime_type),
            ..PutMultipartOptions::default()
        };
        let upload = self
            .store
            .put_multipart_opts(key, opts)
            .await
            .map_err(store_error)?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        let uploaded = async {
            let mut offset = 0u64;
            while offset < len {
                let take = (len - offset).min(PART_BYTES as u64) as usize;
                writer
                    .wait_for_capacity(PARTS_IN_FLIGHT)
                    .await
                    .map_err(store_error)?;
                writer.put(read(offset, take).await?);
                offset += take as u64;
            }
            Ok::<_, ArtifactError>(())
        }
        .await;
        match uploaded {
            Ok(()) => {
                writer.finish().await.map_err(store_error)?;
                Ok(())
            }
            Err(error) => {
                if let Err(abort) = writer.abort().await {
                    tracing::warn!(error = %abort, "could not abort a failed multipart upload");
                }
                Err(error)
            }
        }
    }

    /// Saves an outbox file as the next version of its artifact.
    async fn save_file(&self, pending: &Pending) -> Result<u64, ArtifactError> {
        let scope = ArtifactScope {
            app_name: &pending.app_name,
            user_id: &pending.user_id,
            session_id: &pending.session_id,
        };
        let dir = self.artifact_key(scope, &pending.filename)?;
        let path = pending.path.clone();
        let handle = tokio::task::spawn_blocking(move || SpoolHandle::open(&path))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)))?;
        let version = self
            .claim(&dir, &meta_bytes(pending.mime_type.clone())?)
            .await?;
        let key = dir.child(version.to_string());
        if let Err(error) = self.upload_spool(&key, &pending.mime_type, handle).await {
            self.release(&dir, version).await;
            return Err(error);
        }
        Ok(version)
    }

    /// Names (below `dir`) holding at least one version, each with `prefix` put back.
    async fn names_in(
        &self,
        dir: &Key,
        prefix: &str,
        names: &mut Vec<String>,
    ) -> Result<(), ArtifactError> {
        for (name, last) in self.keys_under(dir).await? {
            if last.parse::<u64>().is_ok() && !name.is_empty() {
                names.push(format!("{prefix}{name}"));
            }
        }
        Ok(())
    }
}

/// A fresh spool folder inside `root`: one per store, so that stores (and processes) sharing a
/// root never take each other's files.
fn spool_folder(root: &Path) -> PathBuf {
    root.join(format!("livegate-spool-{}", uuid::Uuid::new_v4()))
}

/// The sidecar key of a version.
fn meta_key(dir: &Key, version: u64) -> Key {
    dir.child(format!("{version}{META_SUFFIX}"))
}

/// A key segment back to the text it encodes.
fn decode(part: &PathPart<'_>) -> String {
    percent_encoding::percent_decode_str(part.as_ref())
        .decode_utf8_lossy()
        .into_owned()
}

fn content_type(mime_type: &str) -> Attributes {
    Attributes::from_iter([(Attribute::ContentType, mime_type.to_owned())])
}

fn meta_bytes(mime_type: String) -> Result<Bytes, ArtifactError> {
    serde_json::to_vec(&Meta { mime_type })
        .map(Bytes::from)
        .map_err(|e| ArtifactError::InvalidArgument(format!("artifact metadata: {e}")))
}

/// `Ok(None)` for a missing object.
async fn get(store: &dyn ObjectStore, key: &Key) -> Result<Option<Bytes>, ArtifactError> {
    match store.get(key).await {
        Ok(result) => result.bytes().await.map(Some).map_err(store_error),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(store_error(e)),
    }
}

#[async_trait]
impl ArtifactService for ObjectArtifactService {
    async fn save(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        artifact: Artifact,
    ) -> Result<u64, ArtifactError> {
        let dir = self.bucket.artifact_key(scope, filename)?;
        let meta = meta_bytes(artifact.mime_type.clone())?;
        let version = self.bucket.claim(&dir, &meta).await?;
        let key = dir.child(version.to_string());
        if let Err(error) = self
            .bucket
            .put_version(&key, &artifact.mime_type, artifact.data)
            .await
        {
            self.bucket.release(&dir, version).await;
            return Err(error);
        }
        Ok(version)
    }

    async fn load(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        version: Option<u64>,
    ) -> Result<Option<Artifact>, ArtifactError> {
        let dir = self.bucket.artifact_key(scope, filename)?;
        let version = match version {
            Some(v) => v,
            None => match self.bucket.scan(&dir).await?.0.last() {
                Some(v) => *v,
                None => return Ok(None),
            },
        };
        let Some(data) = get(&*self.bucket.store, &dir.child(version.to_string())).await? else {
            return Ok(None);
        };
        let mime_type = match get(&*self.bucket.store, &meta_key(&dir, version)).await? {
            Some(meta) => match serde_json::from_slice::<Meta>(&meta) {
                Ok(meta) => meta.mime_type,
                Err(error) => {
                    tracing::warn!(%error, key = %dir, version, "unreadable artifact metadata");
                    FALLBACK_MIME.to_owned()
                }
            },
            None => FALLBACK_MIME.to_owned(),
        };
        Ok(Some(Artifact { data, mime_type }))
    }

    async fn list_names(&self, scope: ArtifactScope<'_>) -> Result<Vec<String>, ArtifactError> {
        let session = self.bucket.session_key(scope)?;
        let user = self.bucket.user_key(scope)?.child(USER_DIR);
        let mut names = Vec::new();
        self.bucket.names_in(&session, "", &mut names).await?;
        self.bucket.names_in(&user, USER_PREFIX, &mut names).await?;
        names.sort();
        names.dedup();
        Ok(names)
    }

    async fn list_versions(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
    ) -> Result<Vec<u64>, ArtifactError> {
        let dir = self.bucket.artifact_key(scope, filename)?;
        Ok(self.bucket.scan(&dir).await?.0)
    }

    async fn delete(&self, scope: ArtifactScope<'_>, filename: &str) -> Result<(), ArtifactError> {
        let dir = self.bucket.artifact_key(scope, filename)?;
        let keys = self
            .bucket
            .store
            .list(Some(&dir))
            .map_ok(|meta| meta.location)
            .boxed();
        let deleted: Vec<Key> = self
            .bucket
            .store
            .delete_stream(keys)
            .try_collect()
            .await
            .map_err(store_error)?;
        tracing::debug!(key = %dir, objects = deleted.len(), "artifact deleted");
        Ok(())
    }

    fn spool_dir(&self) -> Option<&Path> {
        Some(&self.spool)
    }

    async fn save_spooled(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        mime_type: String,
        spool: SpoolFile,
    ) -> Result<u64, (ArtifactError, SpoolFile)> {
        let prepared = self
            .bucket
            .artifact_key(scope, filename)
            .and_then(|dir| Ok((dir, meta_bytes(mime_type.clone())?, spool.handle()?)));
        let (dir, meta, handle) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => return Err((e, spool)),
        };
        let version = match self.bucket.claim(&dir, &meta).await {
            Ok(version) => version,
            Err(e) => return Err((e, spool)),
        };
        let key = dir.child(version.to_string());
        match self.bucket.upload_spool(&key, &mime_type, handle).await {
            // Dropping the spool removes its local file: the bucket holds the bytes now.
            Ok(()) => Ok(version),
            Err(error) => {
                self.bucket.release(&dir, version).await;
                Err((error, spool))
            }
        }
    }

    async fn save_later(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        mime_type: String,
        spool: SpoolFile,
    ) -> Result<(), (ArtifactError, SpoolFile)> {
        if let Err(e) = self.bucket.artifact_key(scope, filename) {
            return Err((e, spool));
        }
        let dir = self.spool.join(OUTBOX_DIR);
        let path = dir.join(uuid::Uuid::new_v4().to_string());
        let handle = match spool.handle() {
            Ok(handle) => handle,
            Err(e) => return Err((e.into(), spool)),
        };
        let to = path.clone();
        let moved = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir)?;
            handle.persist(&to)
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        if let Err(e) = moved {
            return Err((e.into(), spool));
        }
        spool.moved();
        let pending = Pending {
            app_name: scope.app_name.to_owned(),
            user_id: scope.user_id.to_owned(),
            session_id: scope.session_id.to_owned(),
            filename: filename.to_owned(),
            mime_type,
            path,
        };
        tracing::warn!(filename, "a recording waits on local disk for the bucket");
        let mut outbox = lock(&self.outbox);
        outbox.pending.push(pending);
        if !std::mem::replace(&mut outbox.running, true) {
            tokio::spawn(empty_outbox(self.bucket.clone(), Arc::clone(&self.outbox)));
        }
        Ok(())
    }
}

/// The outbox's folder inside the spool folder.
const OUTBOX_DIR: &str = "outbox";
/// The first wait before the outbox tries its uploads again; it doubles up to the maximum.
const OUTBOX_BACKOFF: Duration = Duration::from_millis(500);
const OUTBOX_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Rounds of tries before the outbox gives up (about an hour at the longest wait); what is left
/// stays on disk.
const OUTBOX_ROUNDS: u32 = 130;

fn lock(outbox: &Mutex<Outbox>) -> MutexGuard<'_, Outbox> {
    // No code path panics while holding it, so a poisoned outbox is still consistent.
    outbox.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Uploads the outbox's recordings, with backoff, until none is left (or it gives up).
async fn empty_outbox(bucket: Bucket, outbox: Arc<Mutex<Outbox>>) {
    let mut backoff = OUTBOX_BACKOFF;
    for _ in 0..OUTBOX_ROUNDS {
        tokio::time::sleep(backoff).await;
        let batch = std::mem::take(&mut lock(&outbox).pending);
        let mut failed = Vec::new();
        for pending in batch {
            match bucket.save_file(&pending).await {
                Ok(version) => {
                    tracing::info!(
                        filename = pending.filename,
                        version,
                        "a recording kept on local disk is saved"
                    );
                    // Best effort: a leftover file is removed with the spool folder.
                    let _ = tokio::fs::remove_file(&pending.path).await;
                }
                Err(error) => {
                    tracing::warn!(%error, filename = pending.filename, "a recording kept on local disk is still not saved");
                    failed.push(pending);
                }
            }
        }
        let mut outbox = lock(&outbox);
        outbox.pending.append(&mut failed);
        if outbox.pending.is_empty() {
            outbox.running = false;
            return;
        }
        drop(outbox);
        backoff = (backoff * 2).min(OUTBOX_BACKOFF_MAX);
    }
    let mut outbox = lock(&outbox);
    let left: Vec<_> = outbox.pending.drain(..).map(|p| p.path).collect();
    outbox.running = false;
    tracing::error!(
        ?left,
        "gave up saving recordings to the bucket; their files stay on local disk"
    );
}

impl Drop for ObjectArtifactService {
    fn drop(&mut self) {
        // Spool files still there belong to recordings that were never saved; recordings in
        // the outbox are kept for someone to upload by hand.
        let left = lock(&self.outbox).pending.len();
        if left > 0 {
            tracing::error!(left, folder = %self.spool.display(), "recordings not saved to the bucket stay on local disk");
        } else {
            let _ = std::fs::remove_dir_all(&self.spool);
        }
    }
}
