//! Spool files: bytes gathered on disk beside a store while they arrive, then saved as one
//! artifact version without passing through memory again.

use std::fs::File;
use std::io::{IoSlice, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

/// The spool folder inside a file store's root. `#` is refused in app names, so it never
/// collides with one.
pub(crate) const SPOOL_DIR: &str = "#spool";

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
}

impl SpoolFile {
    /// Creates an empty spool file in `dir` (blocking).
    pub fn create(dir: &Path) -> std::io::Result<Self> {
        let path = dir.join(uuid::Uuid::new_v4().to_string());
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
                std::fs::create_dir_all(dir)?;
                open()
            }
            opened => opened,
        }?;
        Ok(SpoolFile {
            file,
            path: Some(path),
            len: 0,
            torn: false,
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
        let mut spool = SpoolFile::create(dir.path()).unwrap();
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
