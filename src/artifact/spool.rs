//! Spool files: bytes gathered on disk beside a store while they arrive, then saved as one
//! artifact version without passing through memory again.

use std::any::Any;
use std::fs::File;
use std::io::{IoSlice, Seek, SeekFrom, Write};
use std::ops::Deref;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

/// The spool folder inside a file store's root. `#` is refused in app names, so it never
/// collides with one.
pub(crate) const SPOOL_DIR: &str = "#spool";

/// Where a store wants its spool files: a folder and, for a store that takes a spool's bytes
/// while it grows (an object store, a part at a time), what it tells of every append.
///
/// One pointer wide: every spill the live flow queues carries one.
#[derive(Debug, Clone)]
pub struct SpoolDir(Arc<SpoolDirInner>);

#[derive(Debug)]
struct SpoolDirInner {
    path: PathBuf,
    feeder: Option<Arc<dyn Feeder>>,
}

impl SpoolDir {
    /// A plain folder: its spool files are saved once they are whole.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SpoolDir(Arc::new(SpoolDirInner {
            path: path.into(),
            feeder: None,
        }))
    }

    /// A folder whose spool files `feeder` takes while they grow.
    pub(crate) fn fed(path: impl Into<PathBuf>, feeder: Arc<dyn Feeder>) -> Self {
        SpoolDir(Arc::new(SpoolDirInner {
            path: path.into(),
            feeder: Some(feeder),
        }))
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.0.path
    }
}

impl Deref for SpoolDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0.path
    }
}

impl AsRef<Path> for SpoolDir {
    fn as_ref(&self) -> &Path {
        &self.0.path
    }
}

impl From<&SpoolDir> for SpoolDir {
    fn from(dir: &SpoolDir) -> Self {
        dir.clone()
    }
}

impl From<PathBuf> for SpoolDir {
    fn from(path: PathBuf) -> Self {
        SpoolDir::new(path)
    }
}

impl From<&Path> for SpoolDir {
    fn from(path: &Path) -> Self {
        SpoolDir::new(path)
    }
}

/// A store that takes spool files' bytes while they grow.
pub(crate) trait Feeder: Send + Sync + std::fmt::Debug {
    /// Bytes a spool file holds before it is worth feeding.
    fn threshold(&self) -> u64;
    /// Starts taking the bytes of the spool file `file` (a second handle, read only from);
    /// `None` when it cannot (the spool is then saved whole at the end).
    fn start(&self, file: File) -> Option<Box<dyn Feed>>;
}

/// The bytes of one spool file on their way to a store while it grows.
pub(crate) trait Feed: Send + Sync + std::fmt::Debug {
    /// The spool file now holds `len` bytes, all written (never called from an async task's
    /// thread in a way that blocks: it only records the length).
    fn grown(&self, len: u64);
    /// The feed as its store's own type.
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}

/// A temp file holding the first `len()` bytes of an artifact being gathered; removed when
/// dropped unless a store took it over.
#[derive(Debug)]
pub struct SpoolFile {
    file: File,
    /// `None` once a store has moved the file into place.
    path: Option<PathBuf>,
    len: u64,
    /// A failed append may have left bytes past `len` in the file.
    torn: bool,
    /// The store that wants the bytes while they grow, until it has a feed.
    feeder: Option<Arc<dyn Feeder>>,
    /// The bytes on their way to the store; dropped with the spool, which stops it.
    feed: Option<Box<dyn Feed>>,
}

impl SpoolFile {
    /// Creates an empty spool file in `dir` (blocking).
    pub fn create(dir: &SpoolDir) -> std::io::Result<Self> {
        let path = dir.path().join(uuid::Uuid::new_v4().to_string());
        let open = || {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
        };
        // The folder is there but for the rare removal behind the store's back: make it only
        // then, rather than asking for it before every recording.
        let file = match open() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir.path())?;
                open()
            }
            opened => opened,
        }?;
        Ok(SpoolFile {
            file,
            path: Some(path),
            len: 0,
            torn: false,
            feeder: dir.0.feeder.clone(),
            feed: None,
        })
    }

    /// Bytes held.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when nothing is held yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends chunks (blocking). On error nothing counts as appended: the caller still owns the
    /// chunks and `len()` still covers only whole earlier appends.
    pub fn append(&mut self, chunks: &[Bytes]) -> std::io::Result<()> {
        let mut slices: Vec<IoSlice<'_>> = chunks.iter().map(|c| IoSlice::new(c)).collect();
        let mut rest = &mut slices[..];
        let mut written = 0u64;
        let result = loop {
            if rest.is_empty() {
                break Ok(());
            }
            match self.file.write_vectored(rest) {
                Ok(0) => break Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    written += n as u64;
                    IoSlice::advance_slices(&mut rest, n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        match result {
            Ok(()) => {
                self.len += written;
                self.feed_more();
                Ok(())
            }
            Err(e) => {
                // Later appends must land right after the whole ones; only `len` bytes are ever
                // read or kept, so a partial tail left behind here is never seen.
                let _ = self.file.seek(SeekFrom::Start(self.len));
                self.torn = true;
                Err(e)
            }
        }
    }

    /// Tells the store that wants the bytes how many there are, starting its feed once they
    /// pass its threshold.
    fn feed_more(&mut self) {
        if self.feed.is_none() {
            let Some(feeder) = &self.feeder else {
                return;
            };
            if self.len < feeder.threshold() {
                return;
            }
            self.feed = self
                .file
                .try_clone()
                .ok()
                .and_then(|file| feeder.start(file));
            if self.feed.is_none() {
                // Saved whole at the end instead; no second try per append.
                self.feeder = None;
            }
        }
        if let Some(feed) = &self.feed {
            feed.grown(self.len);
        }
    }

    /// Takes the feed under way, if any: a store finishes it when it saves the spool. The spool
    /// is fed no more.
    pub(crate) fn take_feed(&mut self) -> Option<Box<dyn Feed>> {
        self.feeder = None;
        self.feed.take()
    }

    /// A handle that reads the bytes held, or syncs them and moves the file, on another thread
    /// while this spool stays with the caller (so a failure there loses nothing).
    pub(crate) fn handle(&self) -> std::io::Result<SpoolHandle> {
        let path = self
            .path
            .clone()
            .ok_or_else(|| std::io::Error::other("spool file already moved"))?;
        Ok(SpoolHandle {
            file: self.file.try_clone()?,
            path,
            len: self.len,
            torn: self.torn,
        })
    }

    /// Reads the bytes held back into memory, on the blocking pool.
    pub async fn read(&self) -> std::io::Result<Vec<u8>> {
        let handle = self.handle()?;
        tokio::task::spawn_blocking(move || handle.read())
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)))
    }

    /// Marks the file as moved by a store: dropping the spool no longer removes it.
    pub(crate) fn moved(mut self) {
        self.path = None;
    }
}

/// A second handle on a spool file's bytes (see [`SpoolFile::handle`]).
#[derive(Debug)]
pub(crate) struct SpoolHandle {
    file: File,
    path: PathBuf,
    len: u64,
    torn: bool,
}

impl SpoolHandle {
    /// A handle on a whole file that was a spool once (blocking).
    pub(crate) fn open(path: &Path) -> std::io::Result<Self> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        Ok(SpoolHandle {
            file,
            path: path.to_path_buf(),
            len,
            torn: false,
        })
    }

    /// Bytes held.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Reads the bytes held (blocking).
    pub(crate) fn read(&self) -> std::io::Result<Vec<u8>> {
        let len = usize::try_from(self.len).map_err(std::io::Error::other)?;
        let mut data = vec![0; len];
        self.file.read_exact_at(&mut data, 0)?;
        Ok(data)
    }

    /// Reads `len` bytes from `offset` (blocking); an object store uploads a spool a part at a
    /// time with it.
    pub(crate) fn read_at(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let end = offset.checked_add(len as u64);
        if end.is_none_or(|end| end > self.len) {
            return Err(std::io::Error::other("read past the spooled bytes"));
        }
        let mut data = vec![0; len];
        self.file.read_exact_at(&mut data, offset)?;
        Ok(data)
    }

    /// Syncs the bytes held and renames the file to `to` (blocking); anything a failed append
    /// left past them is cut off first.
    pub(crate) fn persist(&self, to: &Path) -> std::io::Result<()> {
        // Only then: ext4 journals a truncate even to the file's own length (the inode goes on
        // the orphan list and off again), one more journal write per recording saved.
        if self.torn {
            self.file.set_len(self.len)?;
        }
        sync_and_uncache(&self.file)?;
        std::fs::rename(&self.path, to)
    }
}

/// Makes a spool folder of this process's own inside `root` (`{root}/{uuid}`), held by an
/// exclusive lock on `{root}/{uuid}.lock` for as long as the returned file is open, after
/// removing the folders (and loose files) of stores that are gone: their lock is free, or was
/// never taken. Stores of several processes can so share `root` (blocking).
pub(crate) fn own_spool_folder(root: &Path) -> std::io::Result<(PathBuf, File)> {
    use rustix::fs::{flock, FlockOperation};
    use std::os::unix::fs::MetadataExt;

    std::fs::create_dir_all(root)?;
    for item in std::fs::read_dir(root)?.flatten() {
        let path = item.path();
        if path.extension().is_some_and(|e| e == "lock") {
            continue;
        }
        let lock_path = path.with_extension("lock");
        let held = match File::open(&lock_path) {
            Ok(lock) => flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err(),
            Err(_) => false,
        };
        if !held {
            // Spool files of a stopped process hold no saved version.
            let _ = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            let _ = std::fs::remove_file(&lock_path);
        }
    }
    loop {
        let folder = root.join(uuid::Uuid::new_v4().to_string());
        let lock_path = folder.with_extension("lock");
        let lock = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock_path)?;
        flock(&lock, FlockOperation::NonBlockingLockExclusive)?;
        // Another store sweeping at this moment may have taken the free lock first and removed
        // the file: then it is not this folder's lock any more.
        let named = std::fs::metadata(&lock_path);
        let opened = lock.metadata()?;
        if named.is_ok_and(|n| (n.dev(), n.ino()) == (opened.dev(), opened.ino())) {
            std::fs::create_dir_all(&folder)?;
            return Ok((folder, lock));
        }
    }
}

/// Syncs an artifact version's file, written once and seldom read soon (recordings above all),
/// then lets the kernel drop its pages from the cache (blocking).
///
/// Recordings arrive fast under load. Left cached, they take a fresh page for every
/// 4 KiB written, long unused and in a VM perhaps not even backed by the host any more, and they
/// crowd out pages that are read again (the session database). Dropped once clean, their pages go
/// back to the allocator warm, and the next recording's writes reuse them.
pub(crate) fn sync_and_uncache(file: &File) -> std::io::Result<()> {
    file.sync_all()?;
    // Only advice: a kernel that ignores it keeps the pages, which is merely slower.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let _ = rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::DontNeed);
    Ok(())
}

impl Drop for SpoolFile {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            // Best effort: a leftover is swept when the store opens next.
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_append_leaves_nothing_in_the_saved_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = SpoolFile::create(&dir.path().into()).unwrap();
        spool.append(&[Bytes::from_static(b"abc")]).unwrap();
        assert!(!spool.handle().unwrap().torn);
        let path = spool.path.clone().unwrap();
        // An append that wrote part of its bytes, then failed: the tail is in the file, and the
        // spool's own handle refuses the write (read-only).
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"XY")
            .unwrap();
        spool.file = File::open(&path).unwrap();
        assert!(spool.append(&[Bytes::from_static(b"zz")]).is_err());
        assert_eq!(spool.len(), 3);
        spool.file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let to = dir.path().join("saved");
        spool.handle().unwrap().persist(&to).unwrap();
        assert_eq!(std::fs::read(&to).unwrap(), b"abc");
    }
}
