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
//! thread writes them, exactly as for the file store). Once a spool holds a part ([`PART_BYTES`]),
//! its parts go up while the turn runs, in a multipart upload to a staging key
//! (`PREFIX/#staging/…`), and the save puts the last part, then copies the staged object to its
//! version's key inside the bucket; a shorter recording is one put at the save. No recording is
//! ever held whole in memory. A failed upload hands the spool back, still on disk, and the live
//! flow retries it (whole, from the file) at its next flush; recordings still unsaved when their
//! run ends move to the outbox, a folder that outlives the process, which a background task
//! uploads once the bucket answers again (see [`ArtifactService::save_later`]) and which the next
//! store opened on the same folder takes up.

use std::any::Any;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::{Path as Key, PathPart};
use object_store::{
    Attribute, Attributes, MultipartUpload, ObjectStore, PutMode, PutMultipartOptions, PutOptions,
    PutPayload, RetryConfig, WriteMultipart,
};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::spool::{own_spool_folder, Feed, Feeder, SpoolHandle};
use super::{
    validate_filename, validate_scope_id, Artifact, ArtifactError, ArtifactInfo, ArtifactScope,
    ArtifactService, SpoolDir, SpoolFile, USER_PREFIX,
};
use crate::lock::Recover;

/// The longest a save (the one a turn's end waits for) takes by default: past it the recording
/// comes back unsaved, and its run keeps it for later.
pub const DEFAULT_SAVE_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// Local folder for spool files (recordings being gathered before their upload): this
    /// store's own, inside `root/live`.
    spool: SpoolDir,
    /// Holds `spool`'s lock while the store lives (see `own_spool_folder`); `None` when the
    /// folder could not be locked.
    _spool_lock: Option<std::fs::File>,
    /// The folder holding `spool` and the outbox.
    root: PathBuf,
    /// `root` is a fresh temp folder of this store's alone, removed with it when empty.
    own_root: bool,
    /// The store's URL: bucket and prefix, never credentials. Outbox files name it, so that a
    /// store only takes up recordings meant for its own bucket.
    url: String,
    /// Recordings saved later, in the background (see [`ArtifactService::save_later`]).
    outbox: Arc<Mutex<Outbox>>,
    /// Stops the outbox's task when the store goes (its files stay, for the next store).
    stop: CancellationToken,
    /// The longest a save may take, all its requests and retries together (`None`: no bound
    /// but the requests' own).
    save_timeout: Option<Duration>,
}

/// The bucket and the key prefix every artifact lives under (may be empty): what a save needs,
/// shared with the outbox's task.
#[derive(Clone)]
struct Bucket {
    store: Arc<dyn ObjectStore>,
    prefix: Key,
}

impl std::fmt::Debug for Bucket {
    // By hand: the client's own Debug prints its configuration, credentials included.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// Recordings whose run ended before their upload succeeded, waiting in files on local disk.
#[derive(Debug, Default)]
struct Outbox {
    pending: Vec<Pending>,
    /// A task is uploading them.
    running: bool,
}

/// What an outbox entry's `{id}.json` holds: where its recording goes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    /// The store's URL; another store's entries are left alone.
    url: String,
    app_name: String,
    user_id: String,
    session_id: String,
    filename: String,
    mime_type: String,
}

/// One recording in the outbox: `{id}.json` (its [`Entry`]), `{id}.data` (its bytes) and, once a
/// version is claimed for it, `{id}.version`. The store that holds an exclusive `flock` on the
/// `.json` owns the entry; the lock goes with the process, so a store opened later takes up
/// what a stopped (or crashed) one left.
#[derive(Debug)]
struct Pending {
    entry: Entry,
    /// `{outbox}/{id}`: the entry's files are this with `.json`, `.data` and `.version`.
    stem: PathBuf,
    /// The open `.json`, holding the lock.
    _lock: File,
}

impl std::fmt::Debug for ObjectArtifactService {
    // By hand: the client's own Debug prints its configuration, credentials included.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectArtifactService")
            .field("url", &self.url)
            .field("spool", &self.spool.path())
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
/// `with_client_options` would replace the environment's, `AWS_ALLOW_HTTP` among them). Each
/// request, each retry alike, is bounded: a bucket that accepts connections and never answers
/// costs a request 10 s, not the client's default of minutes. (A part of 8 MiB then needs
/// 0.8 MB/s to the bucket.)
const CLIENT_DEFAULTS: [(&str, &str); 2] = [("connect_timeout", "5s"), ("timeout", "10s")];

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
        // A folder of its own: the temp folder is shared, and may be memory.
        let spool_root =
            std::env::temp_dir().join(format!("livegate-spool-{}", uuid::Uuid::new_v4()));
        let mut store = Self::with_store(store, prefix, spool_root, format!("{root}/{path}"));
        store.own_root = true;
        Ok(store)
    }

    /// An artifact's versions, and its latest version's mime type and size, from the bucket's
    /// listing and the latest sidecar: never a version's bytes. `None` if it has no version.
    async fn describe_from_listing(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
    ) -> Result<Option<ArtifactInfo>, ArtifactError> {
        let dir = self.bucket.artifact_key(scope, filename)?;
        let depth = dir.parts().count();
        let metas: Vec<_> = self
            .bucket
            .store
            .list(Some(&dir))
            .try_collect()
            .await
            .map_err(store_error)?;
        let mut versions: Vec<(u64, u64)> = metas
            .iter()
            .filter_map(|meta| {
                let mut parts = meta.location.parts().skip(depth);
                let version = decode(&parts.next()?).parse().ok()?;
                parts.next().is_none().then_some((version, meta.size))
            })
            .collect();
        versions.sort_unstable();
        let Some(&(latest, size)) = versions.last() else {
            return Ok(None);
        };
        let mime_type = match get(&*self.bucket.store, &meta_key(&dir, latest)).await? {
            Some(meta) => serde_json::from_slice::<Meta>(&meta)
                .map_or_else(|_| FALLBACK_MIME.to_owned(), |m| m.mime_type),
            None => FALLBACK_MIME.to_owned(),
        };
        Ok(Some(ArtifactInfo {
            versions: versions.into_iter().map(|(v, _)| v).collect(),
            mime_type,
            size,
        }))
    }

    /// Checks the bucket takes writes (for `/readyz`): one tiny object put and deleted, under a
    /// key no artifact can have (`#` is refused in app names).
    async fn check_bucket_writable(&self) -> Result<(), ArtifactError> {
        let probe = self
            .bucket
            .prefix
            .child("#probe")
            .child(uuid::Uuid::new_v4().to_string());
        let store = &self.bucket.store;
        store
            .put(&probe, PutPayload::from_static(b"0"))
            .await
            .map_err(store_error)?;
        store.delete(&probe).await.map_err(store_error)
    }

    /// Keeps spool files in a folder of this store's own inside `root` (made on first use),
    /// and the outbox in `root/outbox`, rather than in a fresh temp folder; takes up what an
    /// earlier store left in that outbox for this bucket and prefix.
    pub fn with_spool_root(mut self, root: &Path) -> Self {
        // The folder made for the old root holds nothing yet.
        let _ = std::fs::remove_dir_all(self.spool.path());
        self.root = root.to_path_buf();
        self.own_root = false;
        (self.spool, self._spool_lock) = spool_dir(&self.bucket, root);
        self.take_up_outbox();
        self
    }

    /// Artifacts in `store` under `prefix`, with spool files in a folder of this store's own
    /// inside `spool_root` (made on first use) and the outbox in `spool_root/outbox`; takes up
    /// what an earlier store left in that outbox for this `url`.
    pub fn with_store(
        store: Arc<dyn ObjectStore>,
        prefix: Key,
        spool_root: PathBuf,
        url: String,
    ) -> Self {
        let bucket = Bucket { store, prefix };
        let (spool, spool_lock) = spool_dir(&bucket, &spool_root);
        let mut service = ObjectArtifactService {
            spool,
            _spool_lock: spool_lock,
            bucket,
            root: spool_root,
            own_root: false,
            url,
            outbox: Arc::default(),
            stop: CancellationToken::new(),
            save_timeout: Some(DEFAULT_SAVE_TIMEOUT),
        };
        service.take_up_outbox();
        service
    }

    /// Bounds every save by `timeout` (`None`: by its requests' own timeouts only), so that a
    /// turn's end never waits longer on a bucket that does not answer.
    pub fn with_save_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.save_timeout = timeout;
        self
    }

    /// `save` within the store's save timeout. A save cut short leaves at worst an orphan
    /// sidecar (the next save skips its number) or, if its last write lands after all, a
    /// version its caller does not know of, which the caller's retry then saves again.
    async fn bounded<T>(
        &self,
        save: impl std::future::Future<Output = Result<T, ArtifactError>>,
    ) -> Result<T, ArtifactError> {
        match self.save_timeout {
            Some(timeout) => tokio::time::timeout(timeout, save)
                .await
                .unwrap_or(Err(ArtifactError::TimedOut(timeout))),
            None => save.await,
        }
    }

    /// Checks the spool folder takes a byte (for `/readyz`): recordings wait there on their way
    /// to the bucket, so a full or read-only disk there loses them.
    async fn check_spool_writable(&self) -> Result<(), ArtifactError> {
        let dir = self.spool.path().to_path_buf();
        blocking(move || {
            use std::io::Write;
            std::fs::create_dir_all(&dir)?;
            let probe = dir.join(format!(".ready-{}", uuid::Uuid::new_v4()));
            let written = (|| {
                let mut file = File::create(&probe)?;
                file.write_all(b"0")?;
                file.sync_data()
            })();
            let _ = std::fs::remove_file(&probe);
            written
        })
        .await
    }

    /// Recordings this store holds in its outbox.
    #[cfg(test)]
    pub(crate) fn outbox_len(&self) -> usize {
        lock_outbox(&self.outbox).pending.len()
    }

    /// The outbox folder.
    fn outbox_dir(&self) -> PathBuf {
        self.root.join(OUTBOX_DIR)
    }

    /// Claims the outbox entries no live store holds whose recordings go to this store's
    /// bucket, and starts uploading them (blocking: it reads a folder, once, at start).
    fn take_up_outbox(&mut self) {
        let claimed = claim_entries(&self.outbox_dir(), &self.url);
        if claimed.is_empty() {
            return;
        }
        tracing::info!(
            recordings = claimed.len(),
            folder = %self.outbox_dir().display(),
            "recordings an earlier process could not save go to the bucket now"
        );
        let mut outbox = lock_outbox(&self.outbox);
        outbox.pending.extend(claimed);
        drop(outbox);
        self.run_outbox();
    }

    /// Starts the outbox's task unless it runs already (or there is no runtime to run it on:
    /// the entries then wait for the next store).
    fn run_outbox(&self) {
        let mut outbox = lock_outbox(&self.outbox);
        if outbox.running {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        outbox.running = true;
        runtime.spawn(empty_outbox(
            self.bucket.clone(),
            Arc::clone(&self.outbox),
            self.stop.clone(),
        ));
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

    /// Saves an outbox entry as a version of its artifact: the version claimed for it before,
    /// if any (whose bytes may be in place already: a store stopped between the upload and
    /// removing the entry), else the next one. So an entry becomes one version however often
    /// its upload is tried, by however many stores.
    async fn save_entry(&self, pending: &Pending) -> Result<u64, ArtifactError> {
        let entry = &pending.entry;
        let scope = ArtifactScope {
            app_name: &entry.app_name,
            user_id: &entry.user_id,
            session_id: &entry.session_id,
        };
        let dir = self.artifact_key(scope, &entry.filename)?;
        let version_file = pending.stem.with_extension(VERSION_EXT);
        let read = version_file.clone();
        let recorded = blocking(move || read_version(&read)).await?;
        let version = match recorded {
            Some(version) => {
                match self.store.head(&dir.child(version.to_string())).await {
                    Ok(_) => return Ok(version),
                    Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(store_error(e)),
                }
                version
            }
            None => {
                let version = self
                    .claim(&dir, &meta_bytes(entry.mime_type.clone())?)
                    .await?;
                if let Err(error) = blocking(move || write_version(&version_file, version)).await {
                    self.release(&dir, version).await;
                    return Err(error);
                }
                version
            }
        };
        let data = pending.stem.with_extension(DATA_EXT);
        let handle = blocking(move || SpoolHandle::open(&data)).await?;
        // On error the claim stays the entry's, for its next try.
        let key = dir.child(version.to_string());
        self.upload_spool(&key, &entry.mime_type, handle).await?;
        Ok(version)
    }

    /// Saves a spool whose parts went up while it grew: puts the last part, claims a version
    /// and copies the staged object to it, inside the bucket. The staged object is removed
    /// whatever happens; on error the caller still has the spool's file.
    async fn save_staged(
        &self,
        dir: &Key,
        meta: &Bytes,
        feed: PartFeed,
        len: u64,
    ) -> Result<u64, ArtifactError> {
        let PartFeed {
            appended,
            staged,
            task,
        } = feed;
        appended.send_modify(|a| {
            a.len = len;
            a.sealed = true;
        });
        let uploaded = task
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e).into()));
        drop(appended);
        uploaded?;
        let saved = async {
            let version = self.claim(dir, meta).await?;
            let key = dir.child(version.to_string());
            if let Err(error) = self.store.copy(&staged, &key).await {
                self.release(dir, version).await;
                return Err(store_error(error));
            }
            Ok(version)
        }
        .await;
        if let Err(error) = self.store.delete(&staged).await {
            // A bucket's lifecycle rule on the staging prefix removes what is left.
            tracing::warn!(%error, key = %staged, "could not remove a staged recording");
        }
        saved
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

/// A fresh spool folder inside `root/live`, one per store and locked while it lives, so that
/// stores (and processes) sharing a root never take each other's files, and the folders of
/// processes that stopped (even with `kill -9`: their recordings were never saved) are swept
/// when a store opens. Its files go up in parts while they grow when there is a runtime to
/// upload them on.
fn spool_dir(bucket: &Bucket, root: &Path) -> (SpoolDir, Option<std::fs::File>) {
    let live = root.join(LIVE_DIR);
    let (path, lock) = match own_spool_folder(&live) {
        Ok((path, lock)) => (path, Some(lock)),
        Err(error) => {
            // Made on first use; left for a later store to sweep.
            tracing::warn!(%error, folder = %live.display(), "could not lock a spool folder");
            (live.join(uuid::Uuid::new_v4().to_string()), None)
        }
    };
    let spool = match tokio::runtime::Handle::try_current() {
        Ok(runtime) => SpoolDir::fed(
            path,
            Arc::new(PartFeeder {
                bucket: bucket.clone(),
                runtime,
            }),
        ),
        Err(_) => SpoolDir::new(path),
    };
    (spool, lock)
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
        self.bounded(async {
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
        })
        .await
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

    async fn describe(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
    ) -> Result<Option<ArtifactInfo>, ArtifactError> {
        self.describe_from_listing(scope, filename).await
    }

    async fn check_writable(&self) -> Result<(), ArtifactError> {
        self.check_spool_writable().await.map_err(|error| {
            ArtifactError::Io(std::io::Error::other(format!(
                "the spool folder {} cannot be written: {error}",
                self.spool.path().display()
            )))
        })?;
        self.check_bucket_writable().await
    }

    fn spool_dir(&self) -> Option<&SpoolDir> {
        Some(&self.spool)
    }

    async fn save_spooled(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        mime_type: String,
        spool: SpoolFile,
    ) -> Result<u64, (ArtifactError, SpoolFile)> {
        let mut spool = spool;
        let feed = spool
            .take_feed()
            .and_then(|feed| feed.into_any().downcast::<PartFeed>().ok());
        let prepared = self
            .bucket
            .artifact_key(scope, filename)
            .and_then(|dir| Ok((dir, meta_bytes(mime_type.clone())?, spool.handle()?)));
        let (dir, meta, handle) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => return Err((e, spool)),
        };
        let len = spool.len();
        let saved = self.bounded(async {
            if let Some(feed) = feed {
                match self.bucket.save_staged(&dir, &meta, *feed, len).await {
                    Ok(version) => return Ok(version),
                    // The file still holds every byte: it goes up whole now.
                    Err(error) => tracing::warn!(
                        %error,
                        filename,
                        "the parts uploaded during a recording's turn could not be saved; uploading it whole"
                    ),
                }
            }
            let version = self.bucket.claim(&dir, &meta).await?;
            let key = dir.child(version.to_string());
            match self.bucket.upload_spool(&key, &mime_type, handle).await {
                Ok(()) => Ok(version),
                Err(error) => {
                    self.bucket.release(&dir, version).await;
                    Err(error)
                }
            }
        });
        match saved.await {
            // Dropping the spool removes its local file: the bucket holds the bytes now.
            Ok(version) => Ok(version),
            // The spool stays out of the bounded save, so a save cut short loses no byte.
            Err(error) => Err((error, spool)),
        }
    }

    async fn save_later_in_memory(
        &self,
        scope: ArtifactScope<'_>,
        filename: &str,
        mime_type: String,
        data: Bytes,
    ) -> Result<(), ArtifactError> {
        // Into a spool file of its own, then the outbox, as any other: the outbox is on disk.
        // (A plain folder: this file is not uploaded in parts as it grows.)
        let dir = SpoolDir::new(self.spool.path());
        let spool = blocking(move || {
            let mut spool = SpoolFile::create(&dir)?;
            spool.append(&[data])?;
            Ok(spool)
        })
        .await?;
        self.save_later(scope, filename, mime_type, spool)
            .await
            .map_err(|(error, _)| error)
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
        let entry = Entry {
            url: self.url.clone(),
            app_name: scope.app_name.to_owned(),
            user_id: scope.user_id.to_owned(),
            session_id: scope.session_id.to_owned(),
            filename: filename.to_owned(),
            mime_type,
        };
        let prepared = spool
            .handle()
            .map_err(ArtifactError::from)
            .and_then(|handle| {
                let json = serde_json::to_vec(&entry)
                    .map_err(|e| ArtifactError::InvalidArgument(format!("outbox entry: {e}")))?;
                Ok((handle, json))
            });
        let (handle, json) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => return Err((e, spool)),
        };
        let outbox = self.outbox_dir();
        let stem = outbox.join(uuid::Uuid::new_v4().to_string());
        let at = stem.clone();
        let moved = blocking(move || {
            std::fs::create_dir_all(&outbox)?;
            // The entry first, locked before anyone can see it; then the bytes beside it.
            let lock = write_entry(&at, &json)?;
            if let Err(error) = handle.persist(&at.with_extension(DATA_EXT)) {
                let _ = std::fs::remove_file(at.with_extension(ENTRY_EXT));
                return Err(error);
            }
            Ok(lock)
        })
        .await;
        let lock = match moved {
            Ok(lock) => lock,
            Err(e) => return Err((e, spool)),
        };
        spool.moved();
        tracing::warn!(filename, "a recording waits on local disk for the bucket");
        lock_outbox(&self.outbox).pending.push(Pending {
            entry,
            stem,
            _lock: lock,
        });
        self.run_outbox();
        Ok(())
    }
}

/// The outbox's folder inside the spool root.
const OUTBOX_DIR: &str = "outbox";
/// The folder, beside the outbox, holding every store's spool folder.
const LIVE_DIR: &str = "live";
/// An outbox entry's files: where its recording goes, its bytes, the version claimed for it.
const ENTRY_EXT: &str = "json";
const DATA_EXT: &str = "data";
const VERSION_EXT: &str = "version";
/// The key segment (below the prefix) of recordings whose parts go up while their turn runs.
/// `#` is refused in app names, so it never collides with one.
const STAGING_DIR: &str = "#staging";
/// The first wait before the outbox tries its uploads again; it doubles up to the maximum.
const OUTBOX_BACKOFF: Duration = Duration::from_millis(500);
const OUTBOX_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Rounds of tries before the outbox gives up (about an hour at the longest wait); what is left
/// stays on disk, for the next store opened on the folder.
const OUTBOX_ROUNDS: u32 = 130;

fn lock_outbox(outbox: &Mutex<Outbox>) -> MutexGuard<'_, Outbox> {
    // No code path panics while holding it, so a poisoned outbox is still consistent.
    outbox.lock_or_recover()
}

/// Runs blocking file work on the blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, ArtifactError> {
    Ok(tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)))?)
}

/// Writes an outbox entry's `.json` under an exclusive lock taken before the file has its name,
/// so no other store can claim it; returns the open file, which holds the lock (blocking).
fn write_entry(stem: &Path, json: &[u8]) -> std::io::Result<File> {
    use std::io::Write;
    let tmp = stem.with_extension("json.tmp");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    let written = (|| {
        rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)?;
        file.write_all(json)?;
        file.sync_all()?;
        std::fs::rename(&tmp, stem.with_extension(ENTRY_EXT))
    })();
    if let Err(error) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(error);
    }
    Ok(file)
}

/// The version an outbox entry claimed, if it did (blocking).
fn read_version(path: &Path) -> std::io::Result<Option<u64>> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.trim().parse().map(Some).map_err(std::io::Error::other),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Records the version an outbox entry claimed, durably, before its bytes go up (blocking).
fn write_version(path: &Path, version: u64) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("version.tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(version.to_string().as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Claims every entry of the outbox folder that no live store holds and whose recording goes to
/// `url` (blocking).
fn claim_entries(outbox: &Path, url: &str) -> Vec<Pending> {
    let Ok(listing) = std::fs::read_dir(outbox) else {
        return Vec::new();
    };
    let mut claimed = Vec::new();
    for item in listing.flatten() {
        let path = item.path();
        if path.extension().and_then(|e| e.to_str()) != Some(ENTRY_EXT) {
            continue;
        }
        match claim_entry(&path, url) {
            Ok(Some(pending)) => claimed.push(pending),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(%error, file = %path.display(), "an outbox entry could not be read");
            }
        }
    }
    claimed
}

/// Claims one outbox entry: `None` when a live store holds it, another store's bucket is its
/// destination, or it is gone (blocking).
fn claim_entry(path: &Path, url: &str) -> std::io::Result<Option<Pending>> {
    let file = match File::open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        opened => opened?,
    };
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    // Its owner may have saved and removed it between the open and the lock: then the lock is
    // on a file no longer in the folder.
    let named = match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        named => named?,
    };
    let opened = file.metadata()?;
    if (named.dev(), named.ino()) != (opened.dev(), opened.ino()) {
        return Ok(None);
    }
    let entry: Entry = serde_json::from_reader(&file).map_err(std::io::Error::other)?;
    if entry.url != url {
        return Ok(None);
    }
    let stem = path.with_extension("");
    if !stem.with_extension(DATA_EXT).exists() {
        // Its bytes never arrived (a crash while it was written): nothing to save.
        tracing::warn!(file = %path.display(), "an outbox entry without its recording is removed");
        let _ = std::fs::remove_file(stem.with_extension(VERSION_EXT));
        std::fs::remove_file(path)?;
        return Ok(None);
    }
    Ok(Some(Pending {
        entry,
        stem,
        _lock: file,
    }))
}

/// Removes a saved outbox entry's files, its `.json` last (while still holding its lock).
async fn remove_entry(pending: &Pending) {
    for ext in [DATA_EXT, VERSION_EXT, ENTRY_EXT] {
        let _ = tokio::fs::remove_file(pending.stem.with_extension(ext)).await;
    }
}

/// Uploads the outbox's recordings, with backoff, until none is left, it gives up, or the store
/// goes (`stop`).
async fn empty_outbox(bucket: Bucket, outbox: Arc<Mutex<Outbox>>, stop: CancellationToken) {
    let mut backoff = OUTBOX_BACKOFF;
    for _ in 0..OUTBOX_ROUNDS {
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = stop.cancelled() => {
                lock_outbox(&outbox).running = false;
                return;
            }
        }
        let batch = std::mem::take(&mut lock_outbox(&outbox).pending);
        let mut failed = Vec::new();
        for pending in batch {
            match bucket.save_entry(&pending).await {
                Ok(version) => {
                    tracing::info!(
                        filename = pending.entry.filename,
                        version,
                        "a recording kept on local disk is saved"
                    );
                    remove_entry(&pending).await;
                }
                Err(error) => {
                    tracing::warn!(%error, filename = pending.entry.filename, "a recording kept on local disk is still not saved");
                    failed.push(pending);
                }
            }
        }
        let mut outbox = lock_outbox(&outbox);
        outbox.pending.append(&mut failed);
        if outbox.pending.is_empty() {
            outbox.running = false;
            return;
        }
        drop(outbox);
        backoff = (backoff * 2).min(OUTBOX_BACKOFF_MAX);
    }
    let mut outbox = lock_outbox(&outbox);
    let left: Vec<_> = outbox.pending.drain(..).map(|p| p.stem).collect();
    outbox.running = false;
    tracing::error!(
        ?left,
        "gave up saving recordings to the bucket; they stay in the outbox for the next process"
    );
}

/// Sends spool files to the bucket a part at a time while they grow.
#[derive(Debug)]
struct PartFeeder {
    bucket: Bucket,
    /// Where the uploads run: spool files grow on the spill thread, outside the runtime.
    runtime: tokio::runtime::Handle,
}

impl Feeder for PartFeeder {
    fn threshold(&self) -> u64 {
        PART_BYTES as u64
    }

    fn start(&self, file: File) -> Option<Box<dyn Feed>> {
        let staged = self
            .bucket
            .prefix
            .child(STAGING_DIR)
            .child(uuid::Uuid::new_v4().to_string());
        let (appended, grown) = watch::channel(Appended::default());
        let task = self
            .runtime
            .spawn(stage(self.bucket.clone(), staged.clone(), file, grown));
        Some(Box::new(PartFeed {
            appended,
            staged,
            task,
        }))
    }
}

/// How far a spool file has grown, and whether it is whole.
#[derive(Debug, Clone, Copy, Default)]
struct Appended {
    len: u64,
    /// No more bytes come: the upload puts the rest and completes.
    sealed: bool,
}

/// One spool file's multipart upload to its staging key, under way.
#[derive(Debug)]
struct PartFeed {
    /// Dropped unsealed (the spool went unsaved), it makes the upload abort.
    appended: watch::Sender<Appended>,
    staged: Key,
    task: tokio::task::JoinHandle<Result<(), ArtifactError>>,
}

impl Feed for PartFeed {
    fn grown(&self, len: u64) {
        self.appended.send_modify(|a| a.len = len);
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any + Send> {
        self
    }
}

/// Uploads a growing spool file to `key` a whole part at a time, then, once it is sealed, the
/// rest as the last part, and completes the upload. Aborts it on any error, or when the spool
/// is dropped unsealed.
async fn stage(
    bucket: Bucket,
    key: Key,
    file: File,
    mut grown: watch::Receiver<Appended>,
) -> Result<(), ArtifactError> {
    let file = Arc::new(file);
    let mut upload: Option<Box<dyn MultipartUpload>> = None;
    let mut sent = 0u64;
    let staged = async {
        loop {
            let now = *grown.borrow_and_update();
            while now.len - sent >= PART_BYTES as u64 || (now.sealed && now.len > sent) {
                let take = (now.len - sent).min(PART_BYTES as u64) as usize;
                let part = read_part(&file, sent, take).await?;
                let upload = match &mut upload {
                    Some(upload) => upload,
                    None => upload.insert(
                        bucket
                            .store
                            .put_multipart_opts(&key, PutMultipartOptions::default())
                            .await
                            .map_err(store_error)?,
                    ),
                };
                upload.put_part(part.into()).await.map_err(store_error)?;
                sent += take as u64;
            }
            if now.sealed {
                let upload = upload
                    .as_mut()
                    .ok_or_else(|| std::io::Error::other("nothing was staged"))?;
                upload.complete().await.map_err(store_error)?;
                return Ok(());
            }
            if grown.changed().await.is_err() {
                return Err(ArtifactError::Io(std::io::Error::other(
                    "the recording went unsaved",
                )));
            }
        }
    }
    .await;
    if staged.is_err() {
        if let Some(mut upload) = upload {
            if let Err(error) = upload.abort().await {
                tracing::warn!(%error, "could not abort a staged multipart upload");
            }
        }
    }
    staged
}

/// Reads `len` bytes of a spool file from `offset`, on the blocking pool.
async fn read_part(file: &Arc<File>, offset: u64, len: usize) -> Result<Bytes, ArtifactError> {
    let file = Arc::clone(file);
    blocking(move || {
        let mut data = vec![0; len];
        file.read_exact_at(&mut data, offset)?;
        Ok(Bytes::from(data))
    })
    .await
}

impl Drop for ObjectArtifactService {
    fn drop(&mut self) {
        self.stop.cancel();
        // Spool files still there belong to recordings that were never saved.
        let _ = std::fs::remove_dir_all(self.spool.path());
        if self._spool_lock.is_some() {
            let _ = std::fs::remove_file(self.spool.path().with_extension("lock"));
        }
        let outbox = lock_outbox(&self.outbox);
        let left = outbox.pending.len();
        if left > 0 || outbox.running {
            tracing::warn!(left, folder = %self.outbox_dir().display(), "recordings not saved to the bucket stay in the outbox, for the next process started on it");
        } else if self.own_root {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}
